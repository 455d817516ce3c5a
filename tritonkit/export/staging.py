"""What moving a new model folder in removes from the one it replaces.

An export with --force replaces the model folder whole: a version folder it kept would be
served instead of the new export (Triton's default version policy serves the highest).
What the old folder held that the new one lacks is named to the user and recorded.
"""

from __future__ import annotations

import os
from pathlib import Path

_SHOWN = 5      # removed files named in the one-line note; the report lists them all


def replaced_record(old: Path, new: Path) -> dict | None:
    """What moving ``new`` into ``old``'s place removes: the version folders and the files
    (relative paths) ``old`` has and ``new`` has not; None if there is no ``old``."""
    if not old.exists():
        return None
    if old.is_symlink():
        return {"link": os.readlink(old), "removed_versions": [], "removed_files": []}
    if not old.is_dir():
        return {"file": True, "removed_versions": [], "removed_files": []}
    kept = _entries(new)
    gone = sorted(_entries(old) - kept)
    tops = {p.split("/")[0] for p in gone} - {p.split("/")[0] for p in kept}
    versions = sorted((top for top in tops if top.isdigit() and (old / top).is_dir()), key=int)
    files = [p for p in gone if p.split("/")[0] not in versions]
    return {"removed_versions": versions, "removed_files": files}


def _entries(folder: Path) -> set[str]:
    """Every file, link and empty folder under ``folder``, as relative POSIX paths."""
    found = set()
    for root, dirs, files in os.walk(folder):
        here = Path(root).relative_to(folder)
        links = [d for d in dirs if os.path.islink(os.path.join(root, d))]
        found.update((here / entry).as_posix() for entry in (*files, *links))
        if not dirs and not files and root != str(folder):
            found.add(here.as_posix())
    return found


def replaced_line(target: Path, record: dict) -> str:
    """One line for the user: what replacing ``target`` removed."""
    if "link" in record:
        return f"replaced the link {target} (to {record['link']}, which is untouched)"
    if record.get("file"):
        return f"replaced the file {target}"
    versions, files = record["removed_versions"], record["removed_files"]
    removed = []
    if versions:
        removed.append(f"version{'s' if len(versions) > 1 else ''} {', '.join(versions)}")
    if files:
        more = f" and {len(files) - _SHOWN} more" if len(files) > _SHOWN else ""
        removed.append(f"{', '.join(files[:_SHOWN])}{more}")
    if not removed:
        return f"replaced {target}"
    return (f"replaced {target}: removed {' and '.join(removed)}, which the new export does "
            "not have (replaced in export-report.json)")
