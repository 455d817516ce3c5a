"""Writing files so that nothing a user had is lost: atomic writes, no silent overwrite,
the digest stamp that tells a generated file edited by hand; and a file's sha256, read in
blocks."""

from __future__ import annotations

import hashlib
import os
import re
import stat
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from tritonkit.errors import UsageError


def atomic_write(path: Path, data: str | bytes, *, mode: int = 0o644) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename.

    A reader sees the old file or the new one, never half of one. ``mode`` is set
    before the rename, so a secret is never readable by others even for a moment.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(raw)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def refuse_overwrite(path: Path, *, force: bool, what: str = "file",
                     instead: str | None = None) -> None:
    """Raise a UsageError if ``path`` exists and ``force`` was not given. ``instead`` is
    the other way out the hint offers, if the command has one ("give another path")."""
    if Path(path).exists() and not force:
        raise UsageError(f"{what} {path} already exists",
                         hint="pass --force to replace it" + (f", or {instead}" if instead else ""))


#: The file type each output flag writes, for the example a hint gives.
OUTPUT_SUFFIXES = {"--json": ".json", "--csv": ".csv", "--plot": ".png"}


def check_output(path: Path, *, force: bool, what: str, suffix: str | None = None) -> None:
    """Before long work: an output file that exists is kept unless ``force``, and one that
    could not be written (a folder at that path, a file where a folder must be, a folder
    we may not write to) is refused now rather than losing what the work produced.
    ``suffix`` (".csv") makes the hint's example file name."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{what} {path} is a folder",
                         hint=f"give a file name, e.g. {path / ('run' + suffix)}" if suffix
                         else "give a file name, not a folder")
    refuse_overwrite(path, force=force, what=what, instead="give another path")
    _check_writable_folder(path.parent, what=what, target=path)


def check_outputs(outputs: Mapping[str, Path | None], *, force: bool) -> None:
    """Before long work, the files a command was asked to write (flag → path, None: not
    asked): each as ``check_output``; no two naming one file (the second written would
    replace the first); a ``--plot`` ending in .png (matplotlib picks the format from it)."""
    given = {flag: Path(path) for flag, path in outputs.items() if path is not None}
    for flag, path in given.items():
        check_output(path, force=force, what=f"{flag} file", suffix=OUTPUT_SUFFIXES.get(flag))
    resolved = [path.resolve() for path in given.values()]
    same = [flag for flag, path in given.items() if resolved.count(path.resolve()) > 1]
    if same:
        raise UsageError(f"{' and '.join(same)} name the same file ({given[same[0]]}): one "
                         "would replace the other", hint="give each its own path")
    plot = given.get("--plot")
    if plot is not None and plot.suffix.lower() != ".png":
        raise UsageError(f"--plot writes a PNG; {plot} does not end in .png",
                         hint=f"e.g. --plot {plot.with_suffix('.png')}")


def check_folder(path: Path, *, what: str) -> None:
    """An output folder: it may not exist yet, but no part of it may be a file, and the
    nearest part that exists must be a folder we may write to."""
    path = Path(path)
    _check_writable_folder(path, what=what, target=path)


def _check_writable_folder(folder: Path, *, what: str, target: Path) -> None:
    """The nearest existing part of ``folder`` (atomic_write makes the missing ones) must be
    a folder we may write to."""
    existing = next(part for part in (folder, *folder.parents) if part.exists())  # "." or "/" at worst
    if not existing.is_dir():
        raise UsageError(f"cannot write {what} {target}: {existing} is a file, not a folder",
                         hint="choose another folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write {what} {target}: {existing} is not a folder we may write to",
                         hint="choose a path in a folder you can write to")


def sha256_of(path: Path) -> str:
    """The hex sha256 of a file, read 1 MiB at a time (model weights may be gigabytes)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


GENERATED = "# Generated by tritonkit"


def stamp_digest(body: str) -> str:
    """The digest a generated file's header records of the text below it."""
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def read_stamp(text: str, label: str) -> tuple[str | None, str, str]:
    """A generated file's text taken apart: (why it is not as tritonkit wrote it, its
    header of comment lines, its body). ``why`` is None (as written), ``"foreign"`` (no
    GENERATED header), ``"undigested"`` (no ``# <label> <digest>`` line) or ``"edited"``
    (the body's digest is not the one recorded)."""
    lines = text.splitlines(keepends=True)
    top = next((i for i, line in enumerate(lines) if not line.startswith("#")), len(lines))
    header, body = "".join(lines[:top]), "".join(lines[top:])
    if not header.startswith(GENERATED):
        return "foreign", header, body
    recorded = re.search(r"^# " + re.escape(label) + r" ([0-9a-f]{16})$", header, re.M)
    if recorded is None:
        return "undigested", header, body
    if recorded[1] != stamp_digest(body):
        return "edited", header, body
    return None, header, body


def ensure_ignored(folder: Path, patterns: Sequence[str], *,
                   why: str) -> tuple[Path, bool] | None:
    """Add each of ``patterns`` that ``folder/.gitignore`` lacks (the file made if need be,
    the user's lines kept as they are); if it changed, the .gitignore and whether it was
    made, else None.

    Deployment files that hold a secret go wherever ``--out`` says, often inside the
    user's own repository, where a ``git add -A`` would commit them.
    """
    path = Path(folder) / ".gitignore"
    text = path.read_text() if path.exists() else ""
    present = {line.strip() for line in text.splitlines()}
    missing = [pattern for pattern in patterns if pattern not in present]
    if not missing:
        return None
    lead = text if not text or text.endswith("\n") else text + "\n"
    made = not path.exists()
    # A .gitignore kept elsewhere and linked here is written where it lives, with the mode
    # it has: a rename onto the link would put a new 0644 file in its place.
    target = path if made else path.resolve()
    atomic_write(target, lead + f"# {why}\n" + "".join(f"{p}\n" for p in missing),
                 mode=0o644 if made else stat.S_IMODE(target.stat().st_mode))
    return path, made
