"""Server settings are data, and the tritonserver argv is built from them in one place."""

from __future__ import annotations

import pytest

from tests.conftest import EXAMPLE_REPOSITORY, ROOT, run_cli
from tritonkit.errors import ProfileError
from tritonkit.server.settings import Ports, load_server_settings, tritonserver_argv


def test_the_shipped_settings_deploy_with_explicit_control_and_a_restricted_repository_api():
    settings = load_server_settings()
    argv = tritonserver_argv(settings, binary="tritonserver", model_repository="/models",
                             ports=Ports(), models=["a", "b"], secret="s3cr3t")
    assert argv[0] == "tritonserver"
    assert "--model-control-mode=explicit" in argv
    assert argv.count("--load-model=a") == 1 and "--load-model=b" in argv
    assert "--strict-readiness=true" in argv
    assert "--min-supported-compute-capability=6.0" in argv
    assert "--http-restricted-api=model-repository,shared-memory,logging,trace:tritonkit-repository-key=s3cr3t" in argv
    assert "--grpc-restricted-protocol=model-repository,shared-memory,logging,trace:tritonkit-repository-key=s3cr3t" in argv
    assert "--http-address=127.0.0.1" in argv and "--grpc-address=127.0.0.1" in argv


def test_a_profile_can_raise_the_minimum_compute_capability():
    settings = load_server_settings().replace(min_supported_compute_capability=8.6)
    argv = tritonserver_argv(settings, binary="t", model_repository="/m", ports=Ports(),
                             models=[], secret="x")
    assert "--min-supported-compute-capability=8.6" in argv


def test_servers_sharing_a_host_get_their_own_python_backend_shm_prefix():
    argv = tritonserver_argv(load_server_settings(), binary="t", model_repository="/m", ports=Ports(),
                             models=[], secret="x", python_shm_prefix="tritonkit_8000_")
    assert "--backend-config=python,shm-region-prefix-name=tritonkit_8000_" in argv


def test_an_argv_without_a_secret_is_refused():
    with pytest.raises(ValueError):
        tritonserver_argv(load_server_settings(), binary="t", model_repository="/m",
                          ports=Ports(), models=[], secret="")


def test_an_unknown_field_in_server_settings_is_named(tmp_path):
    bad = tmp_path / "server.toml"
    bad.write_text('model_control_mode = "explicit"\nstrict_readines = true\n'
                   '[restricted_api]\nheader = "k"\n')
    with pytest.raises(ProfileError, match="unknown field 'strict_readines'"):
        load_server_settings(bad)


def test_a_wrongly_typed_field_is_named(tmp_path):
    bad = tmp_path / "server.toml"
    bad.write_text('exit_timeout_secs = "soon"\n[restricted_api]\nheader = "k"\n')
    with pytest.raises(ProfileError, match="exit_timeout_secs"):
        load_server_settings(bad)


def test_a_bad_model_control_mode_is_refused(tmp_path):
    bad = tmp_path / "server.toml"
    bad.write_text('model_control_mode = "sometimes"\n[restricted_api]\nheader = "k"\n')
    with pytest.raises(ProfileError, match="model_control_mode"):
        load_server_settings(bad)


@pytest.mark.parametrize("make", ["folder", "binary"])
def test_a_settings_path_that_is_no_toml_file_is_one_line(tmp_path, capsys, make):
    from tests.conftest import run_cli

    path = tmp_path / "settings.toml"
    if make == "folder":
        path.mkdir()
    else:
        path.write_bytes(b"\xff\xfe\x00\x01binary")
    with pytest.raises(ProfileError):
        load_server_settings(path)
    assert run_cli("monitor", "--once", "--thresholds", path) == 2
    err = capsys.readouterr().err
    assert ("is a folder" if make == "folder" else "not UTF-8") in err
    assert "internal error" not in err


@pytest.mark.parametrize("categories", ['["inference"]', "[]"])
def test_settings_that_leave_the_model_repository_api_open_are_refused(tmp_path, capsys,
                                                                      categories):
    """Every deployment restricts load and unload to the secret header: a settings file
    whose restricted categories leave model-repository out (or list none) is refused
    before any file is written or any server started."""
    settings = tmp_path / "server.toml"
    settings.write_text(f'[restricted_api]\nheader = "k"\ncategories = {categories}\n')
    with pytest.raises(ProfileError, match="must include 'model-repository'"):
        load_server_settings(settings)
    out = tmp_path / "docker"
    assert run_cli("deploy", "--target", "compose", "--gpu", "a10", "--no-up", "--repository",
                   EXAMPLE_REPOSITORY, "--out", out, "--server-config", settings) == 2
    assert "model-repository" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("categories,says", [
    ('["model-repository", "models"]', "'models' is not one Triton knows"),
    ('["model-repository", "model-repository"]', "one is listed twice"),
])
def test_restricted_categories_triton_would_refuse_at_start_up_are_refused_here(
        tmp_path, categories, says):
    settings = tmp_path / "server.toml"
    settings.write_text(f'[restricted_api]\nheader = "k"\ncategories = {categories}\n')
    with pytest.raises(ProfileError, match=says):
        load_server_settings(settings)


@pytest.mark.parametrize("header", ["Tritonkit-Key", "tritonkit key", "key=x", "a:b", "key-bin",
                                    "grpc-key", ""])
def test_a_header_that_grpc_metadata_or_tritons_flag_cannot_carry_is_refused(tmp_path, header):
    """gRPC metadata keys are lower-case (grpcio refuses to send 'Tritonkit-Key': "Illegal
    header key"), '-bin' keys carry bytes and 'grpc-' ones are reserved; Triton splits the
    flag at ':' and '='."""
    settings = tmp_path / "server.toml"
    settings.write_text(f'[restricted_api]\nheader = "{header}"\n')
    with pytest.raises(ProfileError, match="restricted_api.header"):
        load_server_settings(settings)


def test_ports_that_clash_are_named_in_words_not_as_a_repr():
    from tritonkit.errors import UsageError
    from tritonkit.server.settings import Ports

    with pytest.raises(UsageError, match=r"^the gRPC and metrics ports are both 9000$"):
        Ports(http=0, grpc=9000, metrics=9000).require_distinct()
    Ports(http=0, grpc=0, metrics=0).require_distinct()          # 0: each picks a free one


@pytest.mark.server
def test_shared_memory_and_logging_need_the_secret_like_the_model_repository(example_server):
    """Registering a shared-memory region is a step of the CVE-2025-23319 chain against the
    python backend, open in Triton 2.51; changing the log level is the server's to do. Without
    the header both are refused; inference, health and statistics stay open."""
    import json
    import urllib.error
    import urllib.request

    base = example_server.http_url if example_server.http_url.startswith("http") else \
        f"http://{example_server.http_url}"

    def post(path: str, body: dict, headers: dict | None = None) -> int:
        request = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json",
                                                  **(headers or {})}, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            exc.close()
            return exc.code

    region = {"key": "/tritonkit-test-absent-region", "offset": 0, "byte_size": 64}
    assert post("/v2/systemsharedmemory/region/probe/register", region) == 403
    assert post("/v2/logging", {"log_verbose_level": 1}) == 403
    # with the deployment's secret, the log settings are the operator's to change
    assert post("/v2/logging", {"log_verbose_level": 0}, example_server.repository_headers()) == 200
    with urllib.request.urlopen(base + "/v2/health/ready", timeout=10) as response:
        assert response.status == 200
    with urllib.request.urlopen(base + "/v2/models/example/stats", timeout=10) as response:
        assert response.status == 200


@pytest.mark.server
def test_a_local_deploy_from_a_settings_file_is_redeployed_from_it(example_repository, tmp_path):
    """The redeploy hint names the settings file a local server was started from: without
    it, following the hint started the server on configs/server.toml's settings instead."""
    from tritonkit.server.state import load_deployment, redeploy_command

    settings = tmp_path / "verbose.toml"
    settings.write_text((ROOT / "configs" / "server.toml").read_text()
                        .replace("log_verbose = 0", "log_verbose = 1"))
    assert run_cli("deploy", "--repository", example_repository, "--server-config", settings,
                   "--http-port", "0", "--grpc-port", "0", "--metrics-port", "0",
                   "--no-warmup", "--timeout", "60") == 0
    try:
        assert "--log-verbose=1" in load_deployment(example_repository).argv
        assert f"--server-config {settings.resolve()}" in redeploy_command(example_repository)
    finally:
        assert run_cli("down", "--repository", example_repository) == 0
