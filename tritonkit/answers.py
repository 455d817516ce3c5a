"""What tritonkit reads from a Triton server, and the check that an answer has that shape.

Every answer a verb reads is checked here before anything reads it: a server that is not
Triton (a web server answering ``{}``, ``[]`` or an HTML page to every path, another
service on the port) or not a version tritonkit speaks gets one line that says so, never a
KeyError deep in a reader.

A shape is data:

- a type, or a tuple of types (``bool`` is no ``int`` here);
- ``INT``: an integer, or the digit string protobuf's JSON makes of an int64;
- ``{key: shape}``: an object with those keys (``"key?"``: optional); other keys are
  allowed, as a newer Triton adds fields. ``{str: shape}``: every value of the object;
- ``[shape]``: a list whose every item has ``shape``.
"""

from __future__ import annotations

from typing import Any

from tritonkit.errors import NotTriton

# The Triton major version whose HTTP/REST and gRPC APIs tritonkit speaks (KServe v2 and
# Triton's extensions: model repository, configuration, statistics).
TRITON_MAJOR = "2"


class _Int:
    def __repr__(self) -> str:
        return "INT"


INT = _Int()

SERVER_METADATA = {"name": str, "version": str, "extensions?": [str]}
_TENSOR_METADATA = {"name": str, "datatype": str, "shape": [INT]}
MODEL_METADATA = {"name": str, "versions?": [str], "platform?": str,
                  "inputs": [_TENSOR_METADATA], "outputs?": [_TENSOR_METADATA]}
_CONFIG_TENSOR = {"name": str, "data_type?": str, "dims?": [INT], "optional?": bool}
MODEL_CONFIG = {
    "name": str, "platform?": str, "backend?": str, "max_batch_size?": INT,
    "input?": [_CONFIG_TENSOR], "output?": [_CONFIG_TENSOR],
    "instance_group?": [{"count?": INT, "kind?": str, "gpus?": [INT]}],
    "dynamic_batching?": {"preferred_batch_size?": [INT]},
    "sequence_batching?": {"control_input?": [{"name?": str, "control?": [dict]}],
                           "oldest?": {"max_candidate_sequences?": INT}},
    "model_warmup?": [{"name?": str, "batch_size?": INT, "count?": INT,
                       "inputs?": {str: {"dims?": [INT], "data_type?": str}}}],
    "model_transaction_policy?": {"decoupled?": bool},
    "ensemble_scheduling?": {"step?": [{"model_name": str}]},
    "parameters?": dict,
}
REPOSITORY_INDEX = [{"name": str, "version?": str, "state?": str, "reason?": str}]
_DURATION = {"count?": INT, "ns?": INT}
STATISTICS = {"model_stats": [{
    "name": str, "version?": str, "last_inference?": INT, "inference_count?": INT,
    "execution_count?": INT,
    "inference_stats?": {name + "?": _DURATION for name in (
        "success", "fail", "queue", "compute_input", "compute_infer", "compute_output")},
}]}
INFER_RESPONSE = {"model_name": str, "outputs": [{"name": str, "datatype": str,
                                                  "shape": [INT]}]}
ERROR = {"error": str}

#: The most of one answer tritonkit reads: Triton's metadata, config, statistics, index or
#: metrics for hundreds of models are a few MiB. A peer that sends more is not Triton.
ANSWER_MAX_BYTES = 64 << 20
#: The most of one inference answer: its outputs, however large a model's, within this.
INFER_ANSWER_MAX_BYTES = 1 << 30


def too_large(server: str, request: str, limit: int) -> NotTriton:
    """NotTriton: the peer's answer to ``request`` ("GET /v2") passed ``limit`` bytes."""
    return not_triton(server, f"its answer to {request} is more than {limit >> 20} MiB")


def expect(answer: Any, shape: Any, *, what: str, server: str) -> Any:
    """``answer`` if it has ``shape``, else NotTriton: the server at ``server`` (host:port)
    answered ``what`` ("its metadata of model 'm'") in a shape Triton never does."""
    problem = mismatch(answer, shape)
    if problem is not None:
        raise not_triton(server, f"{what} {problem}")
    return answer


def not_triton(server: str, why: str) -> NotTriton:
    """The one line for a server that is not Triton: ``why`` says what it answered."""
    return NotTriton(f"the server at {server} is not Triton, or not a version tritonkit "
                     f"speaks: {why}",
                     hint=f"point tritonkit at Triton {TRITON_MAJOR}.x: its HTTP port (8000 by "
                          "default) for --url, its gRPC port (8001) for --grpc-url, its metrics "
                          "port (8002) for --metrics-port")


# The port an HTTP/1.1 request was meant for: what it serves, and the flag that names it.
_MEANT = {"HTTP": ("Triton's HTTP API", "--url takes Triton's HTTP port (8000 by default; a "
                   "deployment's is the HTTP line tritonkit deploy prints)"),
          "metrics": ("Triton's metrics endpoint", "--metrics-port takes Triton's metrics port "
                      "(8002 by default)")}


def not_http1(server: str, answer: bytes, meant: str = "HTTP") -> NotTriton:
    """The one line for a peer whose answer to an HTTP/1.1 request is no HTTP/1.x;
    ``answer``: its first bytes. HTTP/2 (a gRPC port, most often Triton's own given for its
    ``meant`` port, "HTTP" or "metrics") is said to be so; anything else is shown cut short."""
    if speaks_http2(answer):
        serves, hint = _MEANT[meant]
        return NotTriton(f"the server at {server} answers HTTP/2 (gRPC), not {serves}",
                         hint=f"{hint}, not its gRPC port (8001)")
    return not_triton(server, f"its answer is not HTTP/1.x: {_said(answer)}")


def speaks_http2(answer: bytes) -> bool:
    """Whether ``answer`` opens as HTTP/2 does: a server's SETTINGS frame (3 bytes of length,
    type 4, stream 0), a client's preface ("PRI * HTTP/2.0"), or an HTTP/2 status line."""
    return (len(answer) >= 9 and answer[3] == 4 and answer[5:9] == bytes(4)) \
        or answer.startswith((b"PRI * HTTP/2", b"HTTP/2"))


def check_server_metadata(metadata: Any, server: str) -> dict:
    """Triton's own answer to ``GET /v2``: its name "triton" and a version tritonkit speaks."""
    expect(metadata, SERVER_METADATA, what="its server metadata (GET /v2)", server=server)
    name, version = metadata["name"], metadata["version"]
    if name != "triton":
        raise not_triton(server, f"it says it is {_said(name)} {_said(version)}")
    if version.split(".")[0] != TRITON_MAJOR:
        raise not_triton(server, f"it says it is Triton {_said(version)}")
    return metadata


def mismatch(value: Any, shape: Any, path: str = "") -> str | None:
    """Where ``value`` differs from ``shape``, in a few words; None where it does not."""
    where = f" {path}" if path else ""
    if shape is INT:
        if _is_int(value):
            return None
        return f"has{where} = {_said(value)}, not an integer" if path else \
            f"is {_said(value)}, not an integer"
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            return f"is {_kind(value)}, not an object" if not path else \
                f"has{where} {_kind(value)}, not an object"
        for key, inner in shape.items():
            if key is str:              # {str: shape}: every value of the object
                for name, item in value.items():
                    problem = mismatch(item, inner, _join(path, str(name)))
                    if problem:
                        return problem
                continue
            optional = key.endswith("?")
            name = key.removesuffix("?")
            if name not in value:
                if optional:
                    continue
                return f"has no '{_join(path, name)}'"
            problem = mismatch(value[name], inner, _join(path, name))
            if problem:
                return problem
        return None
    if isinstance(shape, list):
        if not isinstance(value, list):
            return f"is {_kind(value)}, not a list" if not path else \
                f"has{where} {_kind(value)}, not a list"
        for index, item in enumerate(value):
            problem = mismatch(item, shape[0], f"{path}[{index}]")
            if problem:
                return problem
        return None
    types = shape if isinstance(shape, tuple) else (shape,)
    if isinstance(value, bool) and bool not in types:
        ok = False
    else:
        ok = isinstance(value, types)
    if ok:
        return None
    wanted = " or ".join(t.__name__ for t in types)
    return (f"has{where} {_kind(value)}, not {wanted}" if path
            else f"is {_kind(value)}, not {wanted}")


def _is_int(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return isinstance(value, str) and value.lstrip("-").isdigit()


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, (dict, list)):
        return "an object" if isinstance(value, dict) else "a list"
    return f"a {type(value).__name__} {_said(value)}"


def _said(value: Any, most: int = 40) -> str:
    """A value the server sent, quoted and cut short: never its raw text on the terminal."""
    text = repr(value)
    return text if len(text) <= most else text[:most - 1] + "…"
