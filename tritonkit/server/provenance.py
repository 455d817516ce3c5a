"""Provenance of the files a deploy writes (the compose file, its env file, the Kubernetes
manifests): a header of comment lines, the last of which carries the sha256 of the text
below it, as ``tritonkit config`` stamps a model config.

A rerun, with the same flags or others, replaces a file whose text still matches its
digest (tritonkit wrote it and nobody edited it: a deploy that found no Docker engine,
say); a file edited by hand, not written by tritonkit, or written for another model
repository (two repositories deployed into one ``--out``), is replaced only with ``--force``. YAML and Compose's env files both read ``#`` lines as comments.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

from tritonkit.errors import UsageError
from tritonkit.fileio import GENERATED, MIB, read_stamp, read_user_file, stamp_digest

_LABEL = "sha256 of the text below, to tell an edit by hand:"
_EDITED = {"foreign": "was not written by tritonkit",
           "undigested": "was written by a tritonkit that recorded no digest",
           "edited": "was edited since tritonkit wrote it"}
_FOR = "written for the model repository:"
_WRITTEN_FOR = re.compile(r"^# " + re.escape(_FOR) + r" (.*)$", re.M)


def stamped(header: str, body: str, written_for: Path | None = None) -> str:
    """``header`` (comment lines, the first starting with GENERATED), the model repository
    the file was ``written_for`` (another repository's files are not a rerun's to
    replace), the digest line of ``body``, then ``body``: the text to write."""
    if not header.startswith(GENERATED) or any(
            not line.startswith("#") for line in header.splitlines()):
        raise ValueError(f"a generated header is comment lines starting {GENERATED!r}")
    if body.startswith("#"):
        raise ValueError("a generated body must not start with a comment: it would be read "
                         "as part of the header")
    origin = f"# {_FOR} {Path(written_for).resolve()}\n" if written_for is not None else ""
    return f"{header}{origin}# {_LABEL} {stamp_digest(body)}\n{body}"


def _read(path: Path, written_for: Path | None = None) -> tuple[str | None, str]:
    """Why ``path`` is not as tritonkit wrote it for ``written_for`` (None: it is), and its
    body."""
    try:
        text = read_user_file(path, what="file", limit=MIB, hint="").decode("utf-8", "replace")
    except UsageError as exc:            # gone, a folder, a FIFO, a device, too large
        return f"cannot be read: {exc.message}", ""
    why, header, body = read_stamp(text, _LABEL)
    if why is not None:
        return _EDITED[why], body
    origin = _WRITTEN_FOR.search(header)
    if written_for is not None and origin is not None \
            and origin[1] != str(Path(written_for).resolve()):
        return f"was written for another model repository ({origin[1]})", body
    return None, body


def edited_by_hand(path: Path, written_for: Path | None = None) -> str | None:
    """Why the file at ``path`` may not be as tritonkit wrote it (edited since, never
    tritonkit's, no digest recorded, unreadable, written for another model repository than
    ``written_for``), or None: as written."""
    return _read(path, written_for)[0]


def body_as_written(path: Path, written_for: Path | None = None) -> str | None:
    """The text below the header of a file tritonkit wrote (for ``written_for``) and nobody
    edited since; None for any other file (or none at all)."""
    why, body = _read(path, written_for)
    return body if why is None else None


def refuse_replacing(paths: Iterable[Path], *, force: bool, what: str,
                     instead: str | None = None, written_for: Path | None = None) -> None:
    """Raise one UsageError naming each of ``paths`` that exists and is not as tritonkit
    wrote it, unless ``force``; files tritonkit wrote and nobody edited are the rerun's to
    replace. ``instead`` is the other way out the hint offers ("give another --out")."""
    if force:
        return
    kept = {Path(p): why for p in paths
            if Path(p).exists() and (why := edited_by_hand(p, written_for))}
    if not kept:
        return
    if len(kept) == 1:
        [(path, why)] = kept.items()
        message = f"{what} {path} already exists and {why}"
    else:
        message = f"{what} files already exist and are not as tritonkit wrote them: " + \
            ", ".join(f"{path} ({why})" for path, why in kept.items())
    it = "it" if len(kept) == 1 else "them"
    raise UsageError(message, hint=f"pass --force to replace {it}" +
                     (f", or {instead}" if instead else ""))
