"""What a model's config says warm-up must send it: every request shape (batch sizes x
dynamic-shape buckets), how many instances and sequence slots a burst must reach, the
correlation IDs of a stateful model's sequences, and the order to load models in (an
ensemble after its steps).

A config here is the JSON ``get_model_config`` returns, or a ``config.pbtxt`` read into
the same form (``file_config``) for a model the server has not loaded yet."""

from __future__ import annotations

import itertools
import secrets
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from tritonkit.errors import UsageError

DEFAULT_DYNAMIC_SIZES = (1, 16)     # a -1 dimension with no model_warmup entry to copy


def _datatype(config_type: str) -> str:
    name = config_type.removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


def _buckets(config: dict) -> list[dict[str, list[int]]]:
    """Concrete non-batch dims per input, one dict per dynamic-shape bucket.

    A -1 dimension takes its sizes from the config's ``model_warmup`` entries (one
    bucket per distinct entry), or else from DEFAULT_DYNAMIC_SIZES."""
    inputs = config.get("input", [])
    if not _dynamic(config):
        return [{i["name"]: [int(d) for d in i.get("dims", [])] for i in inputs}]
    return _entry_buckets(config) or [
        {i["name"]: [size if int(d) == -1 else int(d) for d in i.get("dims", [])] for i in inputs}
        for size in DEFAULT_DYNAMIC_SIZES]


def _dynamic(config: dict) -> bool:
    return any(-1 in [int(d) for d in i.get("dims", [])] for i in config.get("input", []))


def _entry_buckets(config: dict) -> list[dict[str, list[int]]]:
    """The buckets the config's ``model_warmup`` entries give every dynamic dimension."""
    buckets: list[dict[str, list[int]]] = []
    for entry in config.get("model_warmup", []):
        listed = entry.get("inputs", {})
        bucket = {}
        for spec in config.get("input", []):
            if spec.get("optional") and spec["name"] not in listed:
                continue             # the entry leaves it out, as a request may
            dims = [int(d) for d in spec.get("dims", [])]
            given = [int(d) for d in listed.get(spec["name"], {}).get("dims", [])]
            if -1 in dims and len(given) == len(dims):
                dims = [g if d == -1 else d for d, g in zip(dims, given)]
            bucket[spec["name"]] = dims
        if all(-1 not in d for d in bucket.values()) and bucket not in buckets:
            buckets.append(bucket)
    return buckets


def guessed_shapes(config: dict) -> bool:
    """Whether the shapes to warm are guesses: a dynamic dimension that no ``model_warmup``
    entry gives a size to takes DEFAULT_DYNAMIC_SIZES, which the model may refuse."""
    return _dynamic(config) and not _entry_buckets(config)


def warmup_shapes(config: dict) -> list[dict[str, tuple[str, list[int]]]]:
    """Every request shape to warm: batch sizes x dynamic-shape buckets, smallest first.

    ``config`` is the model's config as the server reports it (``get_model_config``).
    For ``max_batch_size > 0`` the batch sizes are 1, every preferred batch size of the
    dynamic batcher, every batch size of the config's ``model_warmup`` entries (generated
    configs list the powers of two there and leave the batcher free), and max_batch_size.
    A stateful model's requests are batch 1 only: its sequence batcher refuses any other
    and forms the model's batches from concurrent sequences (warm-up sends bursts of them).
    Each shape maps input name → (datatype, shape).
    """
    max_batch = int(config.get("max_batch_size", 0))
    if max_batch > 0 and "sequence_batching" in config:
        batches: list[int | None] = [1]
    elif max_batch > 0:
        preferred = config.get("dynamic_batching", {}).get("preferred_batch_size", [])
        warmed = [entry.get("batch_size", 0) for entry in config.get("model_warmup", [])]
        sizes = {int(b) for b in (*preferred, *warmed) if 0 < int(b) <= max_batch}
        batches = sorted({1, max_batch, *sizes})
    else:
        batches = [None]
    types = {i["name"]: _datatype(i["data_type"]) for i in config.get("input", [])}
    buckets = sorted(_buckets(config), key=lambda b: sum(int(np.prod(d)) for d in b.values()))
    return [{name: (types[name], ([batch] if batch else []) + dims) for name, dims in bucket.items()}
            for batch in batches for bucket in buckets]


def model_instances(config: dict) -> int:
    """How many instances of the model Triton runs (per GPU listed for KIND_GPU groups)."""
    groups = config.get("instance_group") or [{}]
    return sum(max(1, int(g.get("count", 1))) * max(1, len(g.get("gpus", []))) for g in groups)


def sequence_slots(config: dict) -> int:
    """Sequences a stateful model's sequence batcher runs at once on one instance: the
    oldest strategy's ``max_candidate_sequences`` where set, else ``max_batch_size`` (at
    least 1), as Triton counts its sequence slots."""
    batching = config.get("sequence_batching", {})
    candidates = int(batching.get("oldest", {}).get("max_candidate_sequences", 0) or 0)
    return candidates if candidates > 0 else max(1, int(config.get("max_batch_size", 0)))


def sequence_ids(config: dict) -> Iterator[int | str]:
    """Correlation IDs for a stateful model's warm-up sequences, far from real traffic's.

    Of the type the model's CORRID control input declares (Triton copies the ID into it
    as it is: a string ID for a TYPE_STRING one, a number cut to 32 bits for TYPE_INT32 or
    TYPE_UINT32, which would make a high 64-bit ID look like a small one to the model).
    Numbers count up from a random point in the upper half of that type's positive range
    (below 2**63, since tritonclient's gRPC client sends an ID as int64), where clients that
    count from 1 never get; random, so two warm-ups at once, or one rerun while an aborted
    one's sequence is still held, do not share an ID (a START on an ID in progress ends that
    sequence early)."""
    if _corrid_type(config) == "TYPE_STRING":
        prefix = f"tritonkit-warmup-{secrets.token_hex(6)}-"
        return (f"{prefix}{n}" for n in itertools.count(1))
    top = {"TYPE_INT32": 2**31, "TYPE_UINT32": 2**32}.get(_corrid_type(config), 2**63)
    return itertools.count(top // 2 + secrets.randbelow(top // 4))


def _corrid_type(config: dict) -> str | None:
    for control_input in config.get("sequence_batching", {}).get("control_input", []):
        for control in control_input.get("control", []):
            if control.get("kind") == "CONTROL_SEQUENCE_CORRID":
                return control.get("data_type")
    return None


def describe_shape(shape: dict[str, tuple[str, list[int]]]) -> str:
    return " ".join(f"{name}:{'x'.join(map(str, dims)) or 'scalar'}"
                    for name, (_, dims) in shape.items())


def not_warmable(config: dict, grpc: bool = True) -> str:
    """Why warm-up cannot send a model requests, or "" if it can: a decoupled model streams
    over gRPC only, so it needs the server's gRPC address (``grpc``)."""
    if config.get("model_transaction_policy", {}).get("decoupled") and not grpc:
        return ("decoupled model: not warmed (Triton serves it over gRPC streaming only, and "
                "no gRPC address is known: --url gives HTTP; add --grpc-url HOST:PORT)")
    return ""


def ensemble_steps(config: dict) -> list[str]:
    return [s["model_name"] for s in config.get("ensemble_scheduling", {}).get("step", [])]


def load_order(models: Sequence[str], configs: dict[str, dict]) -> list[str]:
    """``models`` with every ensemble's steps (added if missing) before the ensemble."""
    order: list[str] = []
    visiting: set[str] = set()

    def visit(name: str) -> None:
        if name in order:
            return
        if name in visiting:
            raise UsageError(f"ensemble '{name}' is one of its own steps",
                             hint=f"fix ensemble_scheduling in {name}/config.pbtxt")
        visiting.add(name)
        for step in ensemble_steps(configs.get(name, {})):
            visit(step)
        visiting.discard(name)
        order.append(name)

    for model in models:
        visit(model)
    return order


def file_config(config_dir: Path | None, name: str) -> dict:
    """A model's config.pbtxt from the folder the server serves, as get_model_config's JSON."""
    if config_dir is None:
        return {}
    path = Path(config_dir) / name / "config.pbtxt"
    if not path.is_file():
        return {}
    from google.protobuf import json_format

    from tritonkit.model_config import read_config

    try:
        message = read_config(path)
    except UsageError:
        return {}  # Triton's load will say what is wrong with it
    return json_format.MessageToDict(message, preserving_proto_field_name=True)
