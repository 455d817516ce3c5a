"""The staging folder an export builds in, the killed exports' ones it clears, and what
moving the new model folder in removes from the one it replaces.

An export builds in ``DIR/.<name>.export-XXXXXXXX/`` and holds an ``flock`` on the
``owner.lock`` file inside for as long as it runs. The kernel drops the lock when the
process ends, however it ends (kill -9, the OOM killer), so a staging folder whose lock
can be taken is proven dead and the next export of that name removes it; one whose lock
is held is a concurrent export's and is left alone. A lock works where a recorded pid
would not: across PID namespaces (containers sharing the repository) and on NFS. The
folder is made and locked as ``.<name>.starting-XXXXXXXX`` and only then renamed, so a
staging folder without ``owner.lock`` is never one being set up: it is an older
tritonkit's, or one the filesystem refused to lock (some FUSE and SMB mounts refuse
flock: the export then runs unlocked). Such a folder, like one whose lock cannot be
tested, may be a running export's: it is left for the user, with a note.

An export with --force replaces the model folder whole: a version folder it kept would be
served instead of the new export (Triton's default version policy serves the highest).
What the old folder held that the new one lacks is named to the user and recorded.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Iterator, NamedTuple

from tritonkit.model_config import edited_by_hand

OWNER_LOCK = "owner.lock"
#: Where a replaced model folder waits inside the staging folder until the new one is in.
PREVIOUS = ".previous"
_SHOWN = 5      # removed files named in the one-line note; the report lists them all
STARTING_GRACE_S = 600.0
_CONFIG = re.compile(r"config\.pbtxt|configs/[^/]+\.pbtxt")
# Read-write: on NFS an flock is an fcntl lock, and an exclusive one needs a file open for
# writing (EBADF otherwise).
_LOCK_OPEN = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC


class OwnedStaging(NamedTuple):
    """A staging folder, and notes for the user about it (one the filesystem left unlocked)."""

    folder: Path
    notes: list[str]


@contextlib.contextmanager
def owned_staging(repository: Path, name: str) -> Iterator[OwnedStaging]:
    """A new staging folder for ``name``, locked as this process's while the block runs,
    and removed after it however it ends. Where the filesystem refuses the lock, the folder
    is unlocked and has no owner.lock (a concurrent export leaves it alone), and a note says so."""
    starting = f".{name}.starting-"
    staging = Path(tempfile.mkdtemp(dir=repository, prefix=starting))
    fd = None
    notes = []
    try:
        # Locked under another name and renamed in: whoever finds owner.lock finds it held.
        fd, locking = tempfile.mkstemp(dir=staging, prefix=".owner.")  # close-on-exec
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:
            # ENOLCK, EOPNOTSUPP: exporting unlocked is what tritonkit did before it locked.
            os.unlink(locking)
            notes.append(f"staged without a lock: the filesystem of {repository} refused one "
                         f"({exc.strerror}), so an export of {name} killed there leaves its "
                         f"staging folder for you to remove")
        else:
            os.replace(locking, staging / OWNER_LOCK)
        # Named as a staging folder only once it is locked (see the module's docstring).
        exporting = staging.with_name(f".{name}.export-{staging.name.removeprefix(starting)}")
        os.rename(staging, exporting)
        staging = exporting
        yield OwnedStaging(staging, notes)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if fd is not None:
            os.close(fd)     # only now: the folder is gone before its lock is free


def clear_dead_stagings(repository: Path, name: str) -> list[str]:
    """Remove the staging folders of ``name``'s killed exports; a note for each one
    removed or restored, and for one left because it cannot be proven dead (no owner.lock,
    or a lock the filesystem will not test). A folder still starting (no owner.lock yet)
    is passed by, unless it is long abandoned (``_abandoned_start``).

    A killed export may have died with the model it replaces parked in its staging folder
    (the instant between the two renames): that model is moved back, not removed.
    """
    repository = Path(repository)
    if not repository.is_dir():
        return []
    pattern = re.compile(rf"\.{re.escape(name)}\.(export|starting)-[a-z0-9_]+")  # mkdtemp's
    notes = []
    for folder in sorted(repository.iterdir()):
        matched = pattern.fullmatch(folder.name)
        if not matched or folder.is_symlink() or not folder.is_dir():
            continue
        try:
            fd = os.open(folder / OWNER_LOCK, _LOCK_OPEN)
        except FileNotFoundError:
            if matched[1] == "export":
                notes.append(_left(folder, repository, name,
                                   f"it has no {OWNER_LOCK} (an older tritonkit's export, or "
                                   "one on a filesystem that refused to lock it)"))
            elif _abandoned_start(folder):
                notes += _clear_dead(folder, repository / name)
            continue
        except OSError as exc:
            notes.append(_left(folder, repository, name,
                               f"its {OWNER_LOCK} cannot be opened ({exc.strerror})"))
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue                        # a running export's
            except OSError as exc:              # ENOLCK, EOPNOTSUPP: no lock, no proof
                notes.append(_left(folder, repository, name,
                                   f"the filesystem refused to lock its {OWNER_LOCK} "
                                   f"({exc.strerror})"))
                continue
            notes += _clear_dead(folder, repository / name)
        finally:
            os.close(fd)
    return notes


def _abandoned_start(folder: Path) -> bool:
    """A folder still named as starting, with no owner.lock, is one being set up (for
    microseconds) or one whose export was killed in those microseconds, which nothing
    else would ever remove. Dead when it is old (STARTING_GRACE_S, generous for the
    clocks of a network filesystem) and no lock file inside it is held."""
    try:
        if time.time() - folder.stat().st_mtime < STARTING_GRACE_S:
            return False
        pending = [entry for entry in folder.iterdir() if entry.name.startswith(".owner.")]
    except OSError:
        return False
    for entry in pending:
        try:
            fd = os.open(entry, _LOCK_OPEN)
        except OSError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:                         # held (a stopped process?), or untestable
            return False
        finally:
            os.close(fd)
    return True


def _left(folder: Path, repository: Path, name: str, why: str) -> str:
    """The note for a staging folder that may be a running export's: how to tell before
    removing it."""
    return (f"left {folder}: {why}, so it may be an export still running; remove it only "
            f"once no process on any machine using {repository} exports {name} (check with ps)")


def _clear_dead(folder: Path, target: Path) -> list[str]:
    notes = []
    previous = folder / PREVIOUS
    if (previous.exists() or previous.is_symlink()) and \
            not (target.exists() or target.is_symlink()):
        os.replace(previous, target)
        notes.append(f"restored {target} from {folder}: an export killed while replacing it "
                     "had left it there")
    shutil.rmtree(folder, ignore_errors=True)
    if not folder.exists():
        notes.append(f"removed {folder}: the staging folder of an export that was killed")
    return notes


def replaced_record(old: Path, new: Path) -> dict | None:
    """What moving ``new`` into ``old``'s place removes: the version folders and the files
    (relative paths) ``old`` has and ``new`` has not, and the configs both have that were
    edited by hand in ``old`` (path -> why); None if there is no ``old``."""
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
    edited = {p: why for p in sorted(kept & _entries(old)) if _CONFIG.fullmatch(p)
              and (why := edited_by_hand(old / p))}
    return {"removed_versions": versions, "removed_files": files, "edited_configs": edited}


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
    edited = record.get("edited_configs") or {}
    removed = []
    if versions:
        removed.append(f"version{'s' if len(versions) > 1 else ''} {', '.join(versions)}")
    if files:
        more = f" and {len(files) - _SHOWN} more" if len(files) > _SHOWN else ""
        removed.append(f"{', '.join(files[:_SHOWN])}{more}")
    said = []
    if removed:
        said.append(f"removed {' and '.join(removed)}, which the new export does not have")
    if edited:
        said.append("replaced " + ", ".join(f"{path} ({why})" for path, why in edited.items())
                    + " with the new export's")
    if not said:
        return f"replaced {target}"
    return f"replaced {target}: {'; '.join(said)} (replaced in export-report.json)"
