"""``reproduce_export.py``: a script beside the exported model that reruns the export alone.

It holds the export's options as data and calls the same CLI, so a failed or
suspicious export can be rerun (with ``TRITONKIT_DEBUG=1``) without the rest of a
pipeline. The script is generated from a dict with ``repr``; no text template.
"""

from __future__ import annotations

import os
from pathlib import Path

from tritonkit.fileio import atomic_write

SCRIPT_NAME = "reproduce_export.py"

_BODY = '''
import os
import sys

from tritonkit.cli import main

if SPEC is None:
    sys.exit("this model was exported from Python (tritonkit.export); set SPEC to a "
             "FILE.py:FACTORY that builds it to rerun the export from here")
if FOLDER is not None and os.path.isdir(FOLDER):
    os.chdir(FOLDER)            # where its package.module imported from

argv = ["export", SPEC]
for flag, value in OPTIONS.items():
    if value is True:
        argv.append(flag)
    elif isinstance(value, list):
        for item in value:
            argv += [flag, str(item)]
    elif value is not None and value is not False:
        argv += [flag, str(value)]
sys.exit(main(argv))
'''


def cli_options(*, name: str, repository: Path, gpu: str | None, fmt: str, max_batch_size: int,
                opset: int, atol: float | None, rtol: float | None, verify: bool,
                verify_batches: str,
                input_names: tuple[str, ...] | None, output_names: tuple[str, ...] | None,
                dynamic_axes: dict[str, dict[int, str]],
                exporters: tuple[str, ...] | None = None) -> dict:
    """The export's options as ``tritonkit export`` flags (``--force``: rerunning replaces it)."""
    return {
        "--name": name,
        "--repository": str(Path(repository).resolve()),
        "--gpu": _profile_as_given(gpu),
        "--format": fmt,
        "--max-batch-size": max_batch_size,
        "--opset": opset,
        "--atol": atol,
        "--rtol": rtol,
        "--no-verify": not verify,
        "--verify-batches": verify_batches if verify and verify_batches != "budget" else None,
        "--input-names": ",".join(input_names) if input_names else None,
        "--output-names": ",".join(output_names) if output_names else None,
        "--dynamic-axis": [f"{inp}:{axis}={label}" for inp, axes in dynamic_axes.items()
                           for axis, label in axes.items()],
        "--exporter": list(exporters or []),
        "--force": True,
    }


def _profile_as_given(gpu: str | None) -> str | None:
    """A profile file's absolute path (the script may be run from anywhere); a profile name
    as it is. The same test load_profile makes: a .toml suffix, or a file that exists."""
    if gpu is None or not (Path(gpu).suffix == ".toml" or Path(gpu).is_file()):
        return gpu
    return str(Path(gpu).resolve())


def write_reproduce_script(folder: Path, *, spec: str | None, options: dict) -> Path:
    """Write ``folder/reproduce_export.py`` and return its path.

    A ``package.module:factory`` spec imports from the working folder the export ran in,
    which the script records and runs from (a FILE.py spec and every path in the options
    are absolute already): run from anywhere else, it could not import the model.
    """
    header = (f'"""Reproduce the tritonkit export of model {options["--name"]!r}: '
              f'python {SCRIPT_NAME}"""\n\n')
    module_spec = spec is not None and not Path(spec.rpartition(":")[0]).is_absolute()
    working_folder = os.getcwd() if module_spec else None
    data = f"SPEC = {spec!r}\nFOLDER = {working_folder!r}\nOPTIONS = {options!r}\n"
    return atomic_write(folder / SCRIPT_NAME, header + data + _BODY, mode=0o755)
