"""`tritonkit loadtest` over gRPC: large requests, several users in one process, a port
nothing answers."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import run_cli
from tritonkit.client import Endpoint
from tritonkit.errors import EXIT_ERROR
from tritonkit.loadtest import LoadSpec, run_loadtest


@pytest.mark.server
def test_a_grpc_request_larger_than_the_servers_window_goes_in_pieces_and_the_call_goes_on(served):
    """HTTP/2 flow control: 1.3 MB is far over the 64 KiB connection window a server grants
    before its first WINDOW_UPDATE. Triton reads all of it (its answer names the full
    shape) and refuses the shape; the connection takes the next big call too."""
    from tritonkit.loadtest import request_template
    from tritonkit.loadtest._transport import RequestFailed, grpc_sender

    template = request_template(Endpoint.from_deployment(served), "example")
    big = template.__class__(model="example", outputs=(), batch_size=8,
                             inputs=(("INPUT__0", "FP32", np.ones((8, 40_000), np.float32)),))
    send = grpc_sender(served.grpc_url, big, 10.0)
    first = send.__self__._sock.getsockname()
    for _ in range(2):
        with pytest.raises(RequestFailed, match="^gRPC INVALID_ARGUMENT: .*40000"):
            send()
    assert send.__self__._sock.getsockname() == first     # the same connection, twice
    good = grpc_sender(served.grpc_url, template, 5.0)
    for _ in range(3):
        good()
    send.__self__.close()
    good.__self__.close()


@pytest.mark.server
def test_grpc_loads_the_same_model_with_several_users_in_one_process(served):
    result = run_loadtest(Endpoint.from_deployment(served),
                          LoadSpec(model="example", concurrency=(3,), protocol="grpc", workers=1,
                                   duration_s=1.5, warmup_s=0.3))
    level = result.levels[0]
    assert result.server == served.grpc_url
    assert level.workers == 1
    assert level.ok > 50 and level.error_count == 0
    assert level.server_split_ms["request"] > 0          # Triton counted what we sent


@pytest.mark.server
def test_a_grpc_port_no_server_answers_is_a_run_that_could_not_start_not_one_whose_requests_failed(
        served, capsys):
    """The model is read over HTTP; the gRPC address is only tried by the first request. No
    server there is exit 1, as no server on the HTTP port is: exit 4 says requests failed."""
    from tests.conftest import unused_port

    code = run_cli("loadtest", "--url", served.http_url, "--grpc-url", f"127.0.0.1:{unused_port()}",
                   "--protocol", "grpc", "--model", "example", "--concurrency", "1", "--duration", "0.5")
    err = capsys.readouterr().err
    assert code == EXIT_ERROR, err
    assert err.startswith("error: could not reach 127.0.0.1:") and "Traceback" not in err
