"""`tritonkit config`: (re)generate a model's Triton configs from its exported graph."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tritonkit.cli import app
from tritonkit.cli.options import Repository, console
from tritonkit.errors import UsageError, shell_word
from tritonkit.model_config import DEFAULT_GPU, config_problems, configure, read_config
from tritonkit.repository import check_model_name


@app.command(epilog="Example: tritonkit config mlp --repository model_repository --gpu a10 --force")
def config(
    name: Annotated[str, typer.Argument(metavar="NAME", help="Model folder name inside the repository.")],
    repository: Repository = Path("model_repository"),
    gpu: Annotated[Optional[str], typer.Option(
        help="GPU profile for config.pbtxt (configs/gpus/<name>.toml; default: the export's "
             f"--gpu, else {DEFAULT_GPU}); every profile also gets configs/<gpu>.pbtxt.")] = None,
    max_batch_size: Annotated[Optional[int], typer.Option(help="Batch limit (default: the export's).", min=0)] = None,
    force: Annotated[bool, typer.Option(help="Replace an existing config.pbtxt.")] = False,
    check: Annotated[bool, typer.Option(help="Only parse the existing configs with Triton's schema.")] = False,
) -> None:
    """Generate a model's Triton config.pbtxt from its exported graph, tuned per GPU profile."""
    check_model_name(name)       # "mlp/" or "../x" would write configs Triton refuses, or elsewhere
    model_dir = repository / name
    if check:
        paths = [model_dir / "config.pbtxt", *sorted((model_dir / "configs").glob("*.pbtxt"))]
        for path in paths:
            parsed = read_config(path)
            if problems := config_problems(parsed):
                raise UsageError(f"{path}: {problems[0]}",
                                 hint=f"regenerate it: tritonkit config {shell_word(name)} --force")
            console.print(f"ok  {path}  ({parsed.platform or parsed.backend}, "
                          f"max_batch_size {parsed.max_batch_size})")
        return
    configured = configure(repository, name, gpu=gpu, max_batch_size=max_batch_size, force=force)
    for path in configured.written:
        # config.pbtxt is what Triton serves without --model-config-name: say whose it is
        whose = f" (the {configured.profile} profile)" if path.name == "config.pbtxt" else ""
        console.print(f"wrote {path}{whose}")
    for note in configured.notes:
        console.print(f"[yellow]note[/] {note}")
    for profile, why in configured.skipped.items():
        console.print(f"[yellow]no config for {profile}[/]: {why}")
