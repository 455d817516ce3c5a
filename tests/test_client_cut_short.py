"""Ctrl-C can land while a tritonclient client is being made. tritonclient's ``__del__``
then reads attributes its ``__init__`` never set, and Python prints "Exception ignored ...
AttributeError" with a traceback after our one-line error (seen in `tune`, one run in five).
A client cut short closes what it had opened and is collected without a word."""

from __future__ import annotations

import gc
import sys

import pytest

from tritonkit.client import Endpoint

pytestmark = pytest.mark.quick


def _cut_short(monkeypatch, module, name):
    """Makes ``module.name`` raise Ctrl-C's exception when the client's __init__ reaches it."""
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(module, name, interrupted)


def _complaints(monkeypatch) -> list:
    said: list = []
    monkeypatch.setattr(sys, "unraisablehook", said.append)
    return said


def test_an_http_client_cut_short_is_collected_without_a_traceback(monkeypatch):
    import tritonclient.http._client as http_client

    said = _complaints(monkeypatch)
    _cut_short(monkeypatch, http_client.gevent.pool, "Pool")   # after its connection pool
    closed = []
    real_from_url = http_client.HTTPClient.from_url

    def from_url(*args, **kwargs):
        stub = real_from_url(*args, **kwargs)
        real_close = stub.close
        stub.close = lambda: (closed.append(True), real_close())
        return stub
    monkeypatch.setattr(http_client.HTTPClient, "from_url", from_url)
    with pytest.raises(KeyboardInterrupt):
        Endpoint("127.0.0.1:9").http()
    gc.collect()
    assert said == []
    assert closed == [True], "the connection pool the cut-short client had made stays open"


def test_a_grpc_client_cut_short_is_collected_without_a_traceback(monkeypatch):
    import tritonclient.grpc._client as grpc_client

    said = _complaints(monkeypatch)
    _cut_short(monkeypatch, grpc_client.service_pb2_grpc, "GRPCInferenceServiceStub")
    with pytest.raises(KeyboardInterrupt):
        Endpoint("127.0.0.1:9", grpc_url="127.0.0.1:9").grpc()
    gc.collect()
    assert said == []


def test_a_client_made_whole_is_the_client_asked_for(monkeypatch):
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    said = _complaints(monkeypatch)
    grpc = Endpoint("127.0.0.1:9", grpc_url="127.0.0.1:9").grpc()
    assert type(grpc) is grpcclient.InferenceServerClient
    http = Endpoint("127.0.0.1:9").http(network_timeout=5.0)
    assert type(http._client) is httpclient.InferenceServerClient
    assert (http.server, http.timeout) == ("127.0.0.1:9", 5.0)
    del grpc, http
    gc.collect()
    assert said == []
