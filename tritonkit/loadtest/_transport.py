"""Senders: one pre-built inference request, posted again and again as cheaply as possible.

The request body is serialized once per worker; each send is one raw POST on a kept-alive
connection (HTTP, geventhttpclient) or one unary call on a shared channel (gRPC). That is
what perf_analyzer does too, and it keeps the Python client out of the measurement.
A send returns None on success and raises ``RequestFailed`` (with a short, stable kind)
on anything else.
"""

from __future__ import annotations

import json
import re
from typing import Callable
from urllib.parse import quote

from tritonkit.loadtest._inputs import RequestTemplate

Send = Callable[[], None]

_MAX_MESSAGE = 2**31 - 1


class RequestFailed(Exception):
    """One request failed; ``kind`` groups it with others like it in the report."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


def error_kind(exc: BaseException) -> str:
    """A short name for a failure, stable across requests (numbers such as ports removed)."""
    if isinstance(exc, RequestFailed):
        return exc.kind
    text = str(exc).strip() or exc.__class__.__name__
    if isinstance(exc, OSError) and exc.strerror:
        text = exc.strerror
    text = re.sub(r"\d+\.\d+\.\d+\.\d+(:\d+)?", "<addr>", text)
    return f"{exc.__class__.__name__}: {text}"[:160]


def http_sender(url: str, template: RequestTemplate, connections: int, timeout: float) -> Send:
    """A send over HTTP/REST with binary tensors, kept-alive connections (gevent-cooperative)."""
    import tritonclient.http as httpclient
    from geventhttpclient import HTTPClient

    host, port = url.removeprefix("http://").rsplit(":", 1)
    client = HTTPClient(host, int(port), concurrency=connections, connection_timeout=timeout,
                        network_timeout=timeout)
    inputs = []
    for name, datatype, data in template.inputs:
        tensor = httpclient.InferInput(name, list(data.shape), datatype)
        tensor.set_data_from_numpy(data, binary_data=True)
        inputs.append(tensor)
    outputs = [httpclient.InferRequestedOutput(name, binary_data=True) for name in template.outputs]
    body, json_size = httpclient.InferenceServerClient.generate_request_body(inputs, outputs or None)
    headers = {"Content-Type": "application/octet-stream"}
    if json_size is not None:
        headers["Inference-Header-Content-Length"] = str(json_size)
    path = f"/v2/models/{quote(template.model)}/infer"
    post = client.post

    def send() -> None:
        response = post(path, body=body, headers=headers)
        data = response.read()  # read it all, or the connection cannot be reused
        if response.status_code != 200:
            raise RequestFailed(f"HTTP {response.status_code}: {_http_error(data)}")

    return send


def grpc_sender(url: str, template: RequestTemplate, timeout: float) -> Send:
    """A send over gRPC: one channel per worker process, shared by its threads."""
    import grpc
    import tritonclient.grpc as grpcclient
    from tritonclient.grpc import service_pb2_grpc
    from tritonclient.grpc._utils import _get_inference_request

    channel = grpc.insecure_channel(url, options=[
        ("grpc.max_send_message_length", _MAX_MESSAGE),
        ("grpc.max_receive_message_length", _MAX_MESSAGE)])
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    inputs = []
    for name, datatype, data in template.inputs:
        tensor = grpcclient.InferInput(name, list(data.shape), datatype)
        tensor.set_data_from_numpy(data)
        inputs.append(tensor)
    outputs = [grpcclient.InferRequestedOutput(name) for name in template.outputs]
    request = _get_inference_request(
        model_name=template.model, inputs=inputs, model_version="", request_id="",
        outputs=outputs or None, sequence_id=0, sequence_start=False, sequence_end=False,
        priority=0, timeout=None, parameters=None)
    infer = stub.ModelInfer

    def send() -> None:
        try:
            infer(request, timeout=timeout)
        except grpc.RpcError as exc:
            raise RequestFailed(f"gRPC {exc.code().name}: {_first_line(exc.details())}") from None

    return send


def _http_error(body: bytes) -> str:
    try:
        return _first_line(json.loads(body)["error"])
    except (ValueError, KeyError, TypeError):
        return _first_line(body.decode("utf-8", "replace")) or "(no body)"


def _first_line(text: str | None) -> str:
    return (text or "").strip().splitlines()[0][:140] if (text or "").strip() else ""
