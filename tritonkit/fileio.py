"""Files, safely: writing so that nothing a user had is lost (atomic writes, no silent
overwrite, the digest stamp that tells a generated file edited by hand); reading a file a
user names only if it is a regular file, with a size bound (``read_user_file``: a FIFO
never blocks, a device is never read); and ``OwnedFolder``, the folder tritonkit keeps in a
model repository (``DIR/.tritonkit``), where no link, FIFO or stray folder is followed."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from tritonkit.errors import UsageError, shell_word


def atomic_write(path: Path, data: str | bytes, *, mode: int = 0o644) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a rename.

    A reader sees the old file or the new one, never half of one. ``mode`` is set
    before the rename, so a secret is never readable by others even for a moment.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    check_replaceable(path)
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
    if not os.path.lexists(path):       # a link that leads nowhere is a file of the user's too
        return
    if not force:
        raise UsageError(f"{what} {path} already exists",
                         hint="pass --force to replace it" + (f", or {instead}" if instead else ""))
    check_replaceable(path, what=what)


def check_replaceable(path: Path, *, what: str = "file") -> None:
    """A UsageError if what is at ``path`` is not a file a write may replace: a FIFO, a
    device or a socket (``--json /dev/null --force`` as root would put a file in its
    place; a FIFO opened to write blocks until a reader comes), or a link to one
    (``/dev/stdout``). A regular file, a link to one, a link that leads nowhere and no file
    at all pass; a folder is refused by the write itself."""
    path = Path(path)
    try:
        info = os.lstat(path)
    except OSError:
        return
    mode = info.st_mode
    if stat.S_ISLNK(mode):
        try:
            mode = os.stat(path).st_mode
        except OSError:
            return
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return
    kind = file_kind(mode)
    if stat.S_ISLNK(info.st_mode):
        kind = f"symbolic link to a {kind}"
    raise UsageError(f"{what} {path} is a {kind}, not a file tritonkit may replace",
                     hint="give the path of a regular file (or of none yet); tritonkit writes "
                          "a new file and renames it into place, never into a pipe or a device")


#: The file type each output flag writes, for the example a hint gives.
OUTPUT_SUFFIXES = {"--json": ".json", "--csv": ".csv", "--plot": ".png"}


# The folder in a repository that holds tritonkit's state (the deployment, its secret, the
# server's log and mirror): no output a user asks for goes in it, --force or not.
STATE_DIRNAME = ".tritonkit"


def refuse_state_folder(path: Path, *, what: str, folder: bool = False) -> None:
    """A UsageError for an output inside a ``.tritonkit`` folder, as ``path`` is written or
    once its links are resolved: a report or a deployment's files there could replace a
    deployment's secret or record. A ``folder`` (``--out``) is refused as well if it is one."""
    path = Path(path)
    real = path.resolve()
    parts = slice(None) if folder else slice(None, -1)
    if STATE_DIRNAME not in real.parts[parts] + path.parts[parts]:
        return
    where = "inside " if STATE_DIRNAME in real.parts[:-1] + path.parts[:-1] else ""
    led = f" (it leads to {real})" if STATE_DIRNAME not in path.parts[parts] else ""
    raise UsageError(f"{what} {path} is {where}a {STATE_DIRNAME} folder{led}, which holds a "
                     "deployment's state, secret and log",
                     hint=f"give a path outside {STATE_DIRNAME}/")


def check_output(path: Path, *, force: bool, what: str, suffix: str | None = None) -> None:
    """Before long work: an output file that exists is kept unless ``force``, and one that
    could not be written (a folder at that path, a file where a folder must be, a folder
    we may not write to, tritonkit's own state folder) is refused now rather than losing
    what the work produced. ``suffix`` (".csv") makes the hint's example file name."""
    path = Path(path)
    refuse_state_folder(path, what=what)
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
    """An output folder: it may not exist yet, but no part of it may be a file, the
    nearest part that exists must be a folder we may write to, and neither it nor a
    folder above it (links resolved) may be a ``.tritonkit`` folder."""
    path = Path(path)
    refuse_state_folder(path, what=what, folder=True)
    _check_writable_folder(path, what=what, target=path)


def _check_writable_folder(folder: Path, *, what: str, target: Path) -> None:
    """The nearest existing part of ``folder`` (atomic_write makes the missing ones) must be
    a folder we may write to; a link on the way that leads nowhere is said as that (making
    the folder failed at it with "File exists")."""
    for existing in (folder, *folder.parents):      # "." or "/" at worst
        if existing.exists():
            break
        if existing.is_symlink():
            raise UsageError(f"cannot write {what} {target}: {existing} is a link to "
                             f"{os.readlink(existing)}, which does not exist",
                             hint="remove the link, or make the folder it points to")
    if not existing.is_dir():
        raise UsageError(f"cannot write {what} {target}: {existing} is a file, not a folder",
                         hint="choose another folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write {what} {target}: {existing} is not a folder we may write to",
                         hint="choose a path in a folder you can write to")


def sha256_of(path: Path) -> str:
    """The hex sha256 of a regular file, read 1 MiB at a time (model weights may be
    gigabytes); a FIFO or device is a UsageError, not a read without end."""
    digest = hashlib.sha256()
    fd = open_regular(path, what="file", hint="a model's files are regular files: copy them "
                                               "in again, or export again")
    with os.fdopen(fd, "rb") as fh:
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
    text = read_user_text(path, what="the file", limit=MIB,
                          hint="make it a text file, or remove it") if path.exists() else ""
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


# --- Reading a user's file: a regular file, read with a bound -------------------------

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


def file_kind(mode: int) -> str:
    """What a file is, in words, from its ``st_mode``."""
    for test, kind in ((stat.S_ISREG, "file"), (stat.S_ISDIR, "folder"),
                       (stat.S_ISLNK, "symbolic link"), (stat.S_ISFIFO, "named pipe (FIFO)"),
                       (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISSOCK, "socket")):
        if test(mode):
            return kind
    return "special file"


def _size(count: int) -> str:
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if count >= size:
            return f"{count / size:.3g} {unit}"
    return f"{count} bytes"


def open_regular(path: Path, *, what: str, hint: str, limit: int | None = None) -> int:
    """A descriptor open for reading on ``path``, a regular file (a link to one is followed:
    the path is the user's) of at most ``limit`` bytes; anything else a UsageError that
    names it. Never blocks: the type is checked before the open, and the open does not
    wait for a FIFO's writer in case one was swapped in between (checked again after)."""
    path = Path(path)
    try:
        info = os.stat(path)
        if stat.S_ISREG(info.st_mode):
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                os.close(fd)
    except FileNotFoundError:
        raise UsageError(f"{what} {path} does not exist", hint=hint) from None
    except OSError as exc:
        raise UsageError(f"cannot read {what} {path} ({exc.strerror or exc})", hint=hint) from None
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(f"{what} {path} is a {file_kind(info.st_mode)}, not a regular file",
                         hint=hint)
    if limit is not None and info.st_size > limit:
        os.close(fd)
        raise UsageError(f"{what} {path} is {_size(info.st_size)}, more than the "
                         f"{_size(limit)} such a file can be", hint=hint)
    return fd


def read_user_file(path: Path, *, what: str, limit: int, hint: str) -> bytes:
    """The bytes of a file a user named (``what``: "the secret file"), a regular file of at
    most ``limit`` bytes; a folder, FIFO, device, missing or larger file is a UsageError
    naming it (``hint``: the fix)."""
    fd = open_regular(path, what=what, hint=hint, limit=limit)
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(limit + 1)          # it may have grown since the stat
    if len(data) > limit:
        raise UsageError(f"{what} {path} is more than the {_size(limit)} such a file can be",
                         hint=hint)
    return data


def read_user_text(path: Path, *, what: str, limit: int, hint: str) -> str:
    """``read_user_file`` decoded as UTF-8; other bytes are a UsageError naming the file."""
    data = read_user_file(path, what=what, limit=limit, hint=hint)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{what} {path} is not UTF-8 text (byte {exc.start} is "
                         f"0x{data[exc.start]:02x})", hint=hint) from None


def check_regular(path: Path, *, what: str, hint: str, limit: int | None = None) -> None:
    """A UsageError unless ``path`` is a regular file (of at most ``limit`` bytes): for a file
    a library opens by its path (ONNX, NumPy), which would block on a FIFO or read a device
    without end."""
    os.close(open_regular(path, what=what, hint=hint, limit=limit))


def read_tail(path: Path, limit: int) -> str:
    """The last ``limit`` bytes of a log tritonkit wrote, as text ('' if it cannot be read:
    gone, or not a regular file). Its last component is not followed if it is a link."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        return ""
    with os.fdopen(fd, "rb") as fh:
        fh.seek(max(0, info.st_size - limit))
        return fh.read(limit).decode("utf-8", "replace")


# --- The folder tritonkit owns inside a model repository -----------------------------

_DIR_OPEN = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def foreign_object(path: Path, mode: int | None = None, *, expected: str = "file",
                   instead: str | None = None) -> UsageError:
    """The error for something tritonkit did not put where it keeps a file (``expected``:
    "file" or "folder"): a link, a FIFO, a device, a folder for a file or the other way.
    ``instead`` is the other way out the hint offers, if the command has one."""
    path = Path(path)
    if mode is None:
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            mode = 0
    kind = file_kind(mode)
    if stat.S_ISLNK(mode):
        try:
            kind += f" to {os.readlink(path)}"
        except OSError:
            pass
    return UsageError(f"{path} is a {kind}, not a {expected} tritonkit made: it is not "
                      "followed, read or written",
                      hint=f"remove it (rm {'-r ' if stat.S_ISDIR(mode) else ''}{shell_word(path)}) and "
                           "run the command again" + (f", or {instead}" if instead else "") +
                           "; tritonkit keeps only its own files there")


def check_owned_folder(path: Path, *, instead: str | None = None) -> None:
    """Before anything is written: ``path``, a folder tritonkit makes and alone writes in a
    folder of the user's (``--out``'s ``k8s/``), is a folder of its own or not there yet.
    A link in its place (wherever it leads), a file or a FIFO is refused with
    ``foreign_object``, as ``OwnedFolder`` refuses it when it opens the folder to write."""
    path = Path(path)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        raise foreign_object(path, info.st_mode, expected="folder", instead=instead)


class OwnedFolder:
    """A folder tritonkit makes and alone writes (``DIR/.tritonkit`` and what is inside it),
    held open by a descriptor.

    ``root`` is the user's folder, reached as its path says; each part of ``relative``
    below it is opened without following a symbolic link, and every name in the folder is
    made, read, replaced or removed relative to the descriptor. A link, FIFO, device, or a
    folder where a file belongs (or the other way) is refused with ``foreign_object``,
    never written through: someone who may write in the repository cannot point a deploy
    at another file. Use it as a context manager (the descriptor is closed at the end)."""

    def __init__(self, root: Path, relative: str | Path = "", *, create: bool = False,
                 mode: int = 0o755) -> None:
        self.path = Path(root).joinpath(relative)
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        here = Path(root)
        for part in Path(relative).parts:
            here = here / part
            fd = _open_subfolder(fd, part, here, create=create, mode=mode)
        self.fd = fd

    @classmethod
    def _of(cls, fd: int, path: Path) -> "OwnedFolder":
        folder = cls.__new__(cls)
        folder.fd, folder.path = fd, path
        return folder

    def __enter__(self) -> "OwnedFolder":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def child(self, name: str, *, create: bool = False, mode: int = 0o755) -> "OwnedFolder":
        """The folder ``name`` in this one (made if ``create``), opened as this one is."""
        return OwnedFolder._of(_open_subfolder(os.dup(self.fd), name, self.path / name,
                                               create=create, mode=mode), self.path / name)

    def lstat(self, name: str) -> os.stat_result | None:
        """``name``'s own status (a link's, not its target's); None if it is not there."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def _require_file(self, name: str) -> os.stat_result | None:
        """``name``'s status if it is a regular file, None if it is not there; else refused."""
        info = self.lstat(name)
        if info is not None and not stat.S_ISREG(info.st_mode):
            raise foreign_object(self.path / name, info.st_mode)
        return info

    def read(self, name: str, limit: int) -> bytes | None:
        """The bytes of the file ``name`` (None if there is none), at most ``limit`` of them."""
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=self.fd)
        except FileNotFoundError:
            return None
        except OSError:                       # ELOOP: a link; or a folder opened for reading
            self._require_file(name)
            raise
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            os.close(fd)
            raise foreign_object(self.path / name, info.st_mode)
        with os.fdopen(fd, "rb") as fh:
            data = fh.read(limit + 1)
        if len(data) > limit:
            raise UsageError(f"{self.path / name} is more than the {_size(limit)} tritonkit "
                             "ever writes there", hint=f"remove it (rm {self.path / name})")
        return data

    def write(self, name: str, data: str | bytes, *, mode: int = 0o644) -> Path:
        """Replace the file ``name`` atomically (a temporary file, then a rename) with
        ``data``, its permissions ``mode`` from the start."""
        self._require_file(name)
        raw = data.encode() if isinstance(data, str) else data
        tmp = f".{name}.{os.urandom(6).hex()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     mode, dir_fd=self.fd)
        try:
            os.fchmod(fd, mode)             # the umask took bits away
            with os.fdopen(fd, "wb") as fh:
                fh.write(raw)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=self.fd)
            raise
        return self.path / name

    def create(self, name: str, *, mode: int = 0o644) -> int:
        """A new file ``name`` open for writing; a descriptor. Only a file this call makes:
        whatever is there already (a link put there since a check) is refused."""
        try:
            return os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                           | os.O_CLOEXEC, mode, dir_fd=self.fd)
        except FileExistsError:
            raise foreign_object(self.path / name) from None

    def rotate(self, name: str, keep: str) -> bool:
        """Rename the file ``name`` to ``keep`` (replacing the one kept before): whether
        there was one. A rename moves names, never what a link points to."""
        if self._require_file(name) is None:
            return False
        self._require_file(keep)
        os.replace(name, keep, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        return True

    def remove(self, name: str) -> bool:
        """Remove ``name`` (a file, or a link, which is not followed); whether it was there.
        A folder is refused."""
        info = self.lstat(name)
        if info is None:
            return False
        if stat.S_ISDIR(info.st_mode):
            raise foreign_object(self.path / name, info.st_mode)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=self.fd)
        return True

    def remove_tree(self, name: str) -> bool:
        """Remove the folder ``name`` and all in it, links unlinked, never followed; whether
        it was there. Anything but a folder there is refused (``foreign_object``)."""
        info = self.lstat(name)
        if info is None:
            return False
        if not stat.S_ISDIR(info.st_mode):
            raise foreign_object(self.path / name, info.st_mode, expected="folder")
        _remove_tree(self.fd, name)
        return True

    def discard(self, name: str) -> bool:
        """Remove ``name`` whatever it is: a folder with all in it, a file or a link (never
        followed); whether it was there."""
        info = self.lstat(name)
        if info is not None and stat.S_ISDIR(info.st_mode):
            return self.remove_tree(name)
        return self.remove(name)

    def names(self) -> list[str]:
        return os.listdir(self.fd)

    def readlink(self, name: str) -> str | None:
        """Where the link ``name`` points; None if ``name`` is no link (or not there)."""
        info = self.lstat(name)
        return os.readlink(name, dir_fd=self.fd) if info and stat.S_ISLNK(info.st_mode) else None

    def rename_into(self, name: str, source: "OwnedFolder", source_name: str) -> None:
        """Rename ``source_name`` of ``source`` to ``name`` here: in one step over a file or
        link of that name; a folder there (or a folder moved over a file) replaces it once
        the old one is gone."""
        new = os.stat(source_name, dir_fd=source.fd, follow_symlinks=False)
        old = self.lstat(name)
        if old is not None and (stat.S_ISDIR(old.st_mode) or stat.S_ISDIR(new.st_mode)):
            self.discard(name)
        os.replace(source_name, name, src_dir_fd=source.fd, dst_dir_fd=self.fd)

    def symlink(self, name: str, target: Path | str) -> None:
        """Make ``name`` a symbolic link to ``target``, replacing a file or link of that
        name (a folder is refused)."""
        if self.lstat(name) is not None:
            if self.readlink(name) == str(target):
                return
            self.remove(name)
        os.symlink(target, name, dir_fd=self.fd)

    def lock(self, name: str) -> int:
        """A descriptor on the lock file ``name`` (made if missing), for ``flock``."""
        try:
            fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                         | os.O_CLOEXEC, 0o644, dir_fd=self.fd)
        except OSError:
            self._require_file(name)
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            mode = os.fstat(fd).st_mode
            os.close(fd)
            raise foreign_object(self.path / name, mode)
        return fd

    def link_file(self, name: str, source: Path, expected: os.stat_result) -> None:
        """``name``, a new file holding ``source``'s bytes: a hard link (no disk, and a later
        replacement of ``source`` leaves it as it is), else a copy. ``expected`` is the
        status of the regular file ``source`` was found to be; a file swapped in since is
        refused rather than taken."""
        try:
            os.link(source, name, dst_dir_fd=self.fd, follow_symlinks=False)
        except FileExistsError:
            raise foreign_object(self.path / name) from None
        except OSError:                          # another filesystem, or no hard links there
            self._copy_file(name, source, expected)
            return
        linked = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        if (linked.st_dev, linked.st_ino) != (expected.st_dev, expected.st_ino):
            os.unlink(name, dir_fd=self.fd)
            raise UsageError(f"{source} changed while it was mirrored",
                             hint="run the command again once nothing writes the repository")

    def _copy_file(self, name: str, source: Path, expected: os.stat_result) -> None:
        src = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            found = os.fstat(src)
            if (found.st_dev, found.st_ino) != (expected.st_dev, expected.st_ino):
                raise UsageError(f"{source} changed while it was mirrored",
                                 hint="run the command again once nothing writes the repository")
            dst = self.create(name, mode=stat.S_IMODE(found.st_mode))
            with os.fdopen(src, "rb", closefd=False) as reader, os.fdopen(dst, "wb") as writer:
                shutil.copyfileobj(reader, writer, 1 << 20)
        finally:
            os.close(src)


def _open_subfolder(parent: int, name: str, path: Path, *, create: bool, mode: int) -> int:
    """Open the folder ``name`` in the folder open as ``parent`` without following a link
    (made first if ``create``); ``parent`` is closed. FileNotFoundError if it is missing
    and not to be made; a UsageError if something else is there."""
    try:
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, mode, dir_fd=parent)
        try:
            return os.open(name, _DIR_OPEN, dir_fd=parent)
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            info = os.stat(name, dir_fd=parent, follow_symlinks=False)
            raise foreign_object(path, info.st_mode, expected="folder") from None
    finally:
        os.close(parent)


def _remove_tree(parent: int, name: str) -> None:
    """Remove the folder ``name`` in ``parent`` and everything in it, through descriptors:
    a link is unlinked, never followed, at any depth."""
    fd = os.open(name, _DIR_OPEN, dir_fd=parent)
    try:
        for entry in os.scandir(fd):
            if entry.is_dir(follow_symlinks=False):
                _remove_tree(fd, entry.name)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.name, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)
