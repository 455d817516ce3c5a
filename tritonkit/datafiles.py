"""Finding and reading tritonkit's configuration data files (``configs/``).

Configuration is data: GPU profiles and server settings are TOML files a user can
read, copy and change. Code reads them into frozen dataclasses through
``dataclass_from_table``, which names the file and the field in every error.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

from tritonkit.errors import ProfileError, UsageError
from tritonkit.fileio import read_user_file

T = TypeVar("T")

CONFIGS_ENV = "TRITONKIT_CONFIGS"


def configs_dir() -> Path:
    """The folder that holds ``server.toml``, ``alerts.toml`` and ``gpus/``.

    ``$TRITONKIT_CONFIGS`` wins; otherwise the ``configs/`` folder of the checkout
    tritonkit runs from, or, installed from a wheel, the copy inside the package.
    """
    override = os.environ.get(CONFIGS_ENV)
    if override:
        if not Path(override).is_dir():     # else each file in it is said to be missing
            raise ProfileError(f"{CONFIGS_ENV}={override} is not a folder",
                               hint="point it at a copy of tritonkit's configs/ folder "
                                    f"(gpus/, server.toml, alerts.toml), or unset {CONFIGS_ENV}")
        return Path(override)
    return shipped_configs_dir()


def shipped_configs_dir() -> Path:
    """The ``configs/`` tritonkit comes with: the checkout's, or the copy a wheel installs
    inside the package; ``$TRITONKIT_CONFIGS`` aside."""
    package = Path(__file__).resolve().parent
    installed = package / "configs"
    return installed if installed.is_dir() else package.parent / "configs"


#: A settings, profile or alerts file is a few KiB; a larger one is no such file.
TOML_MAX_BYTES = 1 << 20


def load_toml(path: Path) -> dict[str, Any]:
    """Parse a TOML file; a missing, malformed or oversized file, or no regular file (a
    folder, a FIFO, a device), is a ProfileError naming it."""
    try:
        data = read_user_file(path, what="configuration file", limit=TOML_MAX_BYTES,
                              hint="give the path of a .toml file, e.g. a copy of one from configs/")
    except UsageError as exc:
        raise ProfileError(exc.message, hint=exc.hint) from None
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise ProfileError(f"{path} is not valid TOML: it is not UTF-8 text",
                           hint="give a TOML file, e.g. one from configs/") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path} is not valid TOML: {exc}",
                           hint="fix the syntax at the line named") from None
    except RecursionError:      # arrays or tables nested thousands deep
        raise ProfileError(f"{path} is not valid TOML for tritonkit: its arrays or tables nest "
                           "deeper than a parser follows",
                           hint="give a TOML file, e.g. one from configs/") from None


def _matches(value: Any, annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    if annotation is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin in (tuple, list):
        args = [a for a in typing.get_args(annotation) if a is not Ellipsis]
        return isinstance(value, (list, tuple)) and all(
            _matches(v, args[0]) for v in value) if args else isinstance(value, (list, tuple))
    if origin is dict:
        return isinstance(value, dict)
    if dataclasses.is_dataclass(annotation):
        return isinstance(value, dict)
    if isinstance(annotation, type):
        return isinstance(value, annotation)
    return True


def dataclass_from_table(cls: type[T], table: dict[str, Any], *, source: str,
                         prefix: str = "") -> T:
    """Build the frozen dataclass ``cls`` from a TOML table.

    Unknown keys, missing required keys and values of the wrong type raise a
    ProfileError that names ``source`` and the dotted field. Nested dataclass
    fields are read from sub-tables; list values become tuples.
    """
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(table) - set(fields))
    if unknown:
        raise ProfileError(
            f"{source}: unknown field '{prefix}{unknown[0]}'",
            hint=f"known fields here: {', '.join(sorted(fields))}")
    values: dict[str, Any] = {}
    for name, field in fields.items():
        dotted = f"{prefix}{name}"
        if name not in table:
            if (field.default is dataclasses.MISSING
                    and field.default_factory is dataclasses.MISSING):
                raise ProfileError(f"{source}: missing field '{dotted}'",
                                   hint=f"add '{name} = ...' to the file")
            continue
        value = table[name]
        annotation = hints[name]
        table_class = _table_class(annotation)
        if table_class is not None and isinstance(value, dict):
            values[name] = dataclass_from_table(table_class, value, source=source,
                                                prefix=f"{dotted}.")
            continue
        if not _matches(value, annotation):
            raise ProfileError(
                f"{source}: field '{dotted}' = {value!r} must be {_describe(annotation)}",
                hint="fix the value's type in the file")
        if isinstance(value, list):
            value = tuple(value)
        if annotation is float and isinstance(value, int):
            value = float(value)
        _refuse_non_finite(value, source, dotted)
        values[name] = value
    return cls(**values)


def _refuse_non_finite(value: Any, source: str, dotted: str) -> None:
    """TOML has ``nan`` and ``inf``; no field of tritonkit's files is one (a threshold, a
    size, a card's figure): each later comparison with it is false, or a conversion to a
    config's integer fails. Refused here, for every number of every file, as a ProfileError
    that names ``source`` and the field."""
    for item in value if isinstance(value, tuple) else (value,):
        if isinstance(item, float) and not math.isfinite(item):
            raise ProfileError(f"{source}: field '{dotted}' = {item} must be a finite number",
                               hint="give a number, not nan or inf")


def _table_class(annotation: Any) -> type | None:
    """The dataclass a field reads from a sub-table: its type, or the one of an optional
    field (``Compute | None``); None for any other field."""
    if dataclasses.is_dataclass(annotation):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        found = [a for a in typing.get_args(annotation) if dataclasses.is_dataclass(a)]
        return found[0] if len(found) == 1 else None
    return None


_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string",
          dict: "a table", list: "a list", tuple: "a list", type(None): "absent"}


def _describe(annotation: Any) -> str:
    """A field's type as a TOML user reads it: "an integer", "a list of strings"."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(a) for a in args if a is not type(None))
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (list, tuple):
        items = [a for a in args if a is not Ellipsis]
        return "a list" + (f" of {_plural(items[0])}" if len(items) == 1 else "")
    return _WORDS.get(origin or annotation, getattr(annotation, "__name__", str(annotation)))


def _plural(annotation: Any) -> str:
    word = _describe(annotation)
    return {"an integer": "integers", "a number": "numbers", "a string": "strings",
            "a table": "tables", "a list": "lists"}.get(word, word)
