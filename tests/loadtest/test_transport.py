"""`tritonkit loadtest` transport: the URLs it takes, connections kept alive, one answer read
alike over HTTP and gRPC, connections within the open-files limit."""

from __future__ import annotations

import pytest

from tests.conftest import run_cli
from tests.loadtest.conftest import _loadtest_model
from tritonkit.client import Endpoint
from tritonkit.errors import EXIT_USAGE


@pytest.mark.parametrize("url, expected", [
    ("127.0.0.1:8000", ("127.0.0.1", 8000)),
    ("http://localhost:9000", ("localhost", 9000)),
    ("[::1]:8000", ("::1", 8000)),
    ("http://[fe80::2]:8001", ("fe80::2", 8001)),
    ("triton.internal", ("triton.internal", 80)),
])
def test_an_http_url_names_its_host_and_port_ipv6_included(url, expected):
    from tritonkit.loadtest._transport import split_host_port

    assert split_host_port(url) == expected


@pytest.mark.parametrize("url, why", [
    ("https://triton.internal:8000", "only plain http"),
    ("triton.internal:8000/v2", "without a path"),
    ("http://:8000", "no host"),
])
def test_a_url_we_would_not_load_as_named_is_refused(url, why):
    from tritonkit.loadtest._transport import split_host_port

    with pytest.raises(ValueError, match=why):
        split_host_port(url)
    with pytest.raises(ValueError, match="the port too"):
        split_host_port("triton.internal", default_port=None)


@pytest.mark.server
@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("cooperative", [False, True])
def test_a_sender_keeps_one_connection_alive_across_requests(served, protocol, cooperative):
    from tritonkit.loadtest import request_template
    from tritonkit.loadtest._transport import RequestFailed, grpc_sender, http_sender

    make, url = (http_sender, served.http_url) if protocol == "http" else (grpc_sender, served.grpc_url)
    template = request_template(Endpoint.from_deployment(served), "example")
    send = make(url, template, 5.0, cooperative=cooperative)
    first = send.__self__._sock.getsockname()
    for _ in range(20):
        send()
    assert send.__self__._sock.getsockname() == first     # the same local port: never reconnected
    wrong = make(url, template.__class__(model="nope", inputs=template.inputs, outputs=(), batch_size=1), 5.0)
    refused = wrong.__self__._sock.getsockname()
    for _ in range(2):                      # an error answer is a whole answer: the connection goes on
        with pytest.raises(RequestFailed, match="HTTP 400|HTTP 404" if protocol == "http" else
                           "^gRPC NOT_FOUND: .*'nope'"):
            wrong()
    assert wrong.__self__._sock.getsockname() == refused
    send.__self__.close()
    wrong.__self__.close()


@pytest.mark.server
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_one_answer_of_the_server_is_read_alike_over_http_and_grpc(encoder_served, capsys, protocol):
    """A model's UNKNOWN error is an HTTP 400 from Triton's HTTP endpoint, as an invalid
    argument is: over gRPC the same answer (UNKNOWN) is the same usage error, exit 2, not a
    run error."""
    code = _loadtest_model(encoder_served, "pair", "--protocol", protocol, "--duration", "30",
                           "--shape", "input_ids:300", "--shape", "attention_mask:300")
    err = capsys.readouterr().err
    assert code == EXIT_USAGE, err
    word = "HTTP 400" if protocol == "http" else "gRPC UNKNOWN"
    assert err.splitlines()[0].endswith(
        f"refused the request: {word}: sequences longer than 256 are not supported (got 300)"), err


def test_more_connections_per_worker_than_the_open_files_limit_is_refused_up_front(monkeypatch,
                                                                                    capsys):
    """A worker raises its soft limit to the hard one; past that it could not start
    ("Too many open files"), a run error that blamed nothing the user could see."""
    import resource

    from tests.conftest import unused_port

    monkeypatch.setattr(resource, "getrlimit", lambda which: (1024, 1024))
    code = run_cli("loadtest", "--url", f"127.0.0.1:{unused_port()}", "--model", "m",
                   "--concurrency", "2100", "--workers", "2")
    assert code == EXIT_USAGE
    assert "a worker would hold 1050 connections; this host allows a process 1024 open files" \
        in capsys.readouterr().err
