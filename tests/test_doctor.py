"""tritonkit doctor: host facts injected, judged one line per check."""

from __future__ import annotations

import dataclasses
import json
import shutil
import socket
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import ROOT, run_cli
from tritonkit.monitor.doctor import (DockerFacts, HostFacts, PortFact, _check_ports, check_host,
                                      check_repository, checks_to_json, gather_host_facts,
                                      image_needs, image_releases_path, load_image_releases,
                                      onnx_file_problem, run_doctor)
from tritonkit.monitor.nvml import GpuIdentity, Nvml
from tritonkit.profiles import load_profile

DOCKER_OK = DockerFacts(cli="/usr/bin/docker", server_version="27.1.1",
                        runtimes=("nvidia", "runc"))
FREE = (PortFact("http", 8000, True), PortFact("grpc", 8001, True), PortFact("metrics", 8002, True))


def host(driver="535.104.05", gpus=((0, "Tesla P100-PCIE-16GB", 6.0),), docker=DOCKER_OK,
         ports=FREE) -> HostFacts:
    return HostFacts(driver_version=driver,
                     gpus=tuple(g if isinstance(g, GpuIdentity) else GpuIdentity(*g) for g in gpus),
                     docker=docker, ports=ports)


def by_name(checks):
    return {c.name: c for c in checks}


def test_a_gpu_nvml_counts_but_cannot_reach_is_named_beside_the_ones_it_can():
    """One lost or forbidden card made NVML "unavailable" for the whole host: doctor said
    to install the driver, and saw no GPU."""
    from tritonkit.monitor.doctor import gather_host_facts
    from tritonkit.monitor.nvml import GpuFault

    class TwoCards:                 # NVML as it answers when it opened only the first card
        unreachable = (GpuFault(1, "GPU is lost (NVML_ERROR_GPU_IS_LOST)"),
                       GpuFault(2, "Insufficient Permissions (NVML_ERROR_NO_PERMISSION)"))

        def open(self): pass
        def close(self): pass
        def driver_version(self): return "535.104.05"
        def identities(self): return [GpuIdentity(0, "Tesla P100-PCIE-16GB", 6.0)]

    facts = gather_host_facts(nvml=TwoCards(), run=lambda *a, **k: None, which=lambda tool: None)
    assert facts.driver_version == "535.104.05" and [g.index for g in facts.gpus] == [0]
    checks = by_name(check_host(dataclasses.replace(host(), gpu_faults=facts.gpu_faults),
                                load_profile("p100")))
    lost, forbidden = checks["gpu 1"], checks["gpu 2"]
    assert lost.status == "problem" and lost.detail == (
        "NVML counts it but cannot reach it: GPU is lost (NVML_ERROR_GPU_IS_LOST)")
    assert "nvidia-smi -r -i 1" in lost.fix
    assert forbidden.status == "warning" and "ls -l /dev/nvidia*" in forbidden.fix
    assert checks["gpu 0"].ok and checks["driver"].ok


def test_a_p100_host_with_its_profiles_image_passes_every_check():
    checks = check_host(host(), load_profile("p100"))
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]


def test_p100_with_a_25_01_image_is_refused_for_compute_capability_7_5():
    checks = by_name(check_host(host(), load_profile("p100"),
                                image="nvcr.io/nvidia/tritonserver:25.01-py3"))
    assert not checks["image"].ok and "needs compute capability 7.5" in checks["image"].detail
    assert "24.10-py3" in checks["image"].fix
    assert not checks["gpu 0"].ok and "minimum 7.5" in checks["gpu 0"].detail


def test_a_driver_below_the_images_own_requirement_on_a_branch_ngc_does_not_list_fails():
    # NGC, 24.10: CUDA 12.6.2 requires driver 560; R510, R530, R550 and R555 are not
    # forward-compatible with it
    p100 = load_profile("p100")
    assert image_needs(p100.stack.triton_image, p100).image_driver == 560
    for old in ("510.108.03", "530.30.02", "550.54.15", "555.42.02"):
        driver = by_name(check_host(host(driver=old), p100))["driver"]
        assert not driver.ok and "older than 560 (CUDA 12" in driver.detail, old
        assert f"R{old[:3]} is not forward-compatible" in driver.detail
        assert driver.fix.startswith("upgrade the NVIDIA driver to ≥ 560")
    # the way out names the newer forward-compatible branches, never an older one
    r530 = by_name(check_host(host(driver="530.30.02"), p100))["driver"]
    assert "R535 ≥ 535.86, R545 ≥ 545.23" in r530.fix and "R525" not in r530.fix
    assert by_name(check_host(host(driver="550.54.15"), p100))["driver"].fix == \
        "upgrade the NVIDIA driver to ≥ 560"
    assert by_name(check_host(host(driver="560.28.03"), p100))["driver"].ok


def test_an_r470_driver_runs_a_cuda_12_image_in_forward_compatibility_mode():
    # NGC: on a data-center GPU the 24.10 image runs on 470.57 or a later R470
    p100 = load_profile("p100")
    lts = by_name(check_host(host(driver="470.223.02"), p100))["driver"]
    assert lts.ok and "forward-compatibility mode" in lts.detail
    early = by_name(check_host(host(driver="470.42.01"), p100))["driver"]
    assert not early.ok and "470.57 or a later R470" in early.fix and "≥ 560" in early.fix
    # not a CUDA 13 image: the A10's 25.12 needs 580
    a10 = by_name(check_host(host(driver="470.223.02", gpus=((0, "NVIDIA A10", 8.6),)),
                             load_profile("a10")))["driver"]
    assert not a10.ok


def test_a_driver_of_a_listed_branch_is_compared_by_release_not_by_branch_alone():
    # NGC: a CUDA 12 image on a data-center GPU needs 525.85 or a later R525, 535.86 or a
    # later R535: 525.60 is branch 525, yet too old
    p100 = load_profile("p100")
    early = by_name(check_host(host(driver="525.60.13"), p100))["driver"]
    assert not early.ok and "older than 525.85" in early.detail
    assert "525.85 or a later R525" in early.fix
    assert by_name(check_host(host(driver="525.85.12"), p100))["driver"].ok
    assert by_name(check_host(host(driver="525.147.05"), p100))["driver"].ok
    assert not by_name(check_host(host(driver="535.54.03"), p100))["driver"].ok
    assert by_name(check_host(host(driver="535.86.05"), p100))["driver"].ok
    assert not by_name(check_host(host(driver="545.22.01"), p100))["driver"].ok
    assert by_name(check_host(host(driver="545.23.08"), p100))["driver"].ok
    # an A10 (CUDA 13 image) on 525.60 is not told a CUDA 12 image would do
    a10 = by_name(check_host(host(driver="525.60.13", gpus=((0, "NVIDIA A10", 8.6),)),
                             load_profile("a10")))["driver"]
    assert not a10.ok and "25.07" not in a10.fix


DRIVERS = ["460.91.03", "470.42.01", "470.57.02", "470.223.02", "510.108.03", "525.60.13",
           "525.85.12", "525.147.05", "530.30.02", "535.54.03", "535.86.05", "535.230.02",
           "545.22.01", "545.23.08", "550.54.15", "555.42.02", "560.28.03", "565.57.01",
           "570.86.10", "575.51.03", "580.65.06", "590.44.01"]


def _driver_ok(driver: str, profile, image=None) -> bool:
    gpu = (0, "probe", profile.compute_capability)
    return by_name(check_host(host(driver=driver, gpus=(gpu,)), profile, image=image))["driver"].ok


def test_a_driver_that_passes_still_passes_after_an_upgrade_within_its_branch_or_to_the_images_own():
    """530.30 and 555.42 passed where 525.60 and 535.54 failed: a branch NGC does not list
    passed from its first release whenever it was at least CUDA 12's 525."""
    cases = [(load_profile("p100"), None, 560), (load_profile("a10"), None, 580),
             # another tag: its own requirement (24.04's release notes: 545, R545 from 545.23)
             (load_profile("p100"), "nvcr.io/nvidia/tritonserver:24.04-py3", 545)]
    for profile, image, requirement in cases:
        verdicts = {d: _driver_ok(d, profile, image) for d in DRIVERS}
        # at or above the image's requirement: failing, then passing for good
        above = [verdicts[d] for d in DRIVERS if int(d.split(".")[0]) >= requirement]
        assert above == sorted(above) and above[-1], (profile.name, image, above)
        for driver, ok in verdicts.items():
            later = [d for d in DRIVERS if d.split(".")[0] == driver.split(".")[0]
                     and DRIVERS.index(d) > DRIVERS.index(driver)]
            if ok:
                assert all(verdicts[d] for d in later), (profile.name, image, driver, later)
    # the profile's image: below 560 only the forward-compatible branches NGC lists
    p100 = load_profile("p100")
    passing = [d for d in DRIVERS if _driver_ok(d, p100) and int(d[:3]) < 560]
    assert passing == ["470.57.02", "470.223.02", "525.85.12", "525.147.05", "535.86.05",
                       "535.230.02", "545.23.08"]


def test_a_profile_whose_image_driver_is_below_its_cuda_floor_is_refused(tmp_path):
    from tritonkit.errors import ProfileError
    from tritonkit.profiles import gpus_dir

    text = (gpus_dir() / "p100.toml").read_text().replace("image_driver = 560", "image_driver = 470")
    (tmp_path / "mine.toml").write_text(text)
    try:
        load_profile(tmp_path / "mine.toml")
    except ProfileError as exc:
        assert "'stack.image_driver' = 470 is below 'stack.min_driver' = 525" in exc.message
    else:
        raise AssertionError("an image_driver below the CUDA floor was accepted")


def test_a_cuda_13_image_needs_driver_580_and_a_525_driver_is_pointed_at_cuda_12():
    a10 = host(driver="550.54.15", gpus=((0, "NVIDIA A10", 8.6),))
    driver = by_name(check_host(a10, load_profile("a10")))["driver"]
    assert not driver.ok and "older than 580 (CUDA 13" in driver.detail
    # the newest CUDA 12 release a 550 runs: 24.06 asks for 545, 24.07 for 555 (R550 unlisted)
    assert "use nvcr.io/nvidia/tritonserver:24.06-py3 (CUDA 12.5.0.23)" in driver.fix
    ok = by_name(check_host(host(driver="580.65.06", gpus=((0, "NVIDIA A10", 8.6),)),
                            load_profile("a10")))["driver"]
    assert ok.ok


def test_the_cuda_major_comes_from_the_image_tag():
    p100 = load_profile("p100")
    assert image_needs("nvcr.io/nvidia/tritonserver:25.08-py3", p100).min_driver == 580
    assert image_needs("nvcr.io/nvidia/tritonserver:24.04-py3", p100).cuda_major == 12


def test_a_gpu_that_is_not_the_profiles_card_names_the_right_profile():
    gpu = by_name(check_host(host(gpus=((0, "NVIDIA A10", 8.6),)), load_profile("p100")))["gpu 0"]
    assert not gpu.ok and gpu.fix == "--gpu a10"


def test_a_p100_checked_against_the_a10_profile_is_pointed_at_the_p100_profile_not_its_image():
    # the A10's 25.12 needs compute capability 7.5: the fix is the P100's profile and image,
    # never the image that ignores the card
    a10_host = host(driver="580.65.06", gpus=((0, "Tesla P100-PCIE-16GB", 6.0),))
    gpu = by_name(check_host(a10_host, load_profile("a10")))["gpu 0"]
    assert not gpu.ok and "minimum 7.5" in gpu.detail
    assert gpu.fix == "--gpu p100 (its image: nvcr.io/nvidia/tritonserver:24.10-py3)"
    # a mixed host without --gpu: the A10 found first picks the profile, the P100 is sent to its own
    mixed = by_name(run_doctor(None, host(driver="580.65.06", gpus=(
        (0, "NVIDIA A10", 8.6), (1, "Tesla P100-PCIE-16GB", 6.0)))))
    assert mixed["gpu 0"].ok and mixed["gpu 1"].fix.startswith("--gpu p100 ")


def test_a_card_of_the_profiles_compute_capability_with_less_memory_is_not_that_card():
    a10 = load_profile("a10")
    # an NVIDIA A2 is compute capability 8.6 too, with 16 GB (NVML: 15,356 MiB)
    a2 = by_name(check_host(host(driver="580.65.06", gpus=((0, "NVIDIA A2", 8.6, 15_356),)),
                            a10))["gpu 0"]
    assert not a2.ok and "15.0 GiB, not 24" in a2.detail and "a10.toml" in a2.fix
    # a real A10 reads less than its 24 GiB with ECC on (23,028 MiB): still the A10
    real = by_name(check_host(host(driver="580.65.06", gpus=((0, "NVIDIA A10", 8.6, 23_028),)),
                              a10))["gpu 0"]
    assert real.ok
    # the P100 PCIe 12 GB is the p100's compute capability with three quarters of its memory
    p100_12 = by_name(check_host(host(gpus=((0, "Tesla P100-PCIE-12GB", 6.0, 12_193),)),
                                 load_profile("p100")))["gpu 0"]
    assert not p100_12.ok and "not 16" in p100_12.detail


def test_bad_memory_the_card_has_not_yet_set_aside_is_a_problem_p100_pages_a10_rows():
    # a P100 retires pages, an A10 remaps rows: each pending until the GPU resets
    p100 = by_name(check_host(host(gpus=(GpuIdentity(0, "Tesla P100-PCIE-16GB", 6.0, 16_280,
                                                     retired_pages_pending=True),)),
                              load_profile("p100")))["gpu 0"]
    assert not p100.ok and "retired memory pages are pending" in p100.detail
    assert "nvidia-smi -r -i 0" in p100.fix
    a10 = lambda **memory: by_name(check_host(  # noqa: E731
        host(driver="580.65.06", gpus=(GpuIdentity(0, "NVIDIA A10", 8.6, 23_028, **memory),)),
        load_profile("a10")))["gpu 0"]
    pending = a10(remapped_rows_pending=True, row_remap_failed=False)
    assert not pending.ok and "row remap is pending" in pending.detail
    failed = a10(remapped_rows_pending=False, row_remap_failed=True)
    assert not failed.ok and "replaced" in failed.fix
    assert a10(remapped_rows_pending=False, row_remap_failed=False).ok


def test_nvml_memory_bookkeeping_is_read_where_the_card_has_it():
    from tests.monitor.conftest import _fake_pynvml
    from tritonkit.monitor.nvml import Nvml

    fake = _fake_pynvml()                           # a P100: no row remapping
    fake.nvmlDeviceGetRetiredPagesPendingStatus = lambda h: 1
    with Nvml(fake) as nvml:
        (p100,) = nvml.identities()
    assert p100.retired_pages_pending is True and p100.remapped_rows_pending is None
    assert p100.ecc_mode_change_pending is False


def test_without_gpu_flag_the_gpu_found_picks_the_profile():
    checks = run_doctor(None, host(gpus=((0, "NVIDIA A10", 8.6),), driver="580.1"))
    assert by_name(checks)["gpu 0"].ok


def test_docker_absent_engine_down_and_no_nvidia_runtime_are_problems_with_fixes():
    p100 = load_profile("p100")
    absent = by_name(check_host(host(docker=DockerFacts()), p100))
    assert not absent["docker"].ok and "install Docker" in absent["docker"].fix
    assert not absent["nvidia runtime"].ok and "nvidia-ctk" in absent["nvidia runtime"].fix
    down = by_name(check_host(host(docker=DockerFacts(cli="/usr/bin/docker", error="refused")), p100))
    assert not down["docker"].ok and "systemctl start docker" in down["docker"].fix
    toolkit = DockerFacts(cli="/usr/bin/docker", server_version="27", runtimes=("runc",),
                          nvidia_tools=("nvidia-container-runtime-hook", "nvidia-ctk"))
    assert by_name(check_host(host(docker=toolkit), p100))["nvidia runtime"].ok


def test_nvidia_tools_without_the_hook_docker_runs_for_gpus_are_a_problem():
    # nvidia-container-toolkit-base (nvidia-ctk) or libnvidia-container-tools
    # (nvidia-container-cli) alone: docker run --gpus fails 'could not select device driver'
    for tools in (("nvidia-ctk", "nvidia-container-runtime"), ("nvidia-container-cli",)):
        facts = host(docker=DockerFacts(cli="/usr/bin/docker", server_version="27",
                                        runtimes=("runc",), nvidia_tools=tools))
        check = by_name(check_host(facts, load_profile("p100")))["nvidia runtime"]
        assert not check.ok and "nvidia-container-runtime-hook" in check.detail
        assert "install nvidia-container-toolkit" in check.fix


def test_docker_info_is_read_for_version_and_runtimes():
    info = json.dumps({"ServerVersion": "27.1.1", "Runtimes": {"runc": {}, "nvidia": {}}})
    run = lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout=info, stderr="")  # noqa: E731
    facts = gather_host_facts(ports={}, run=run, which=lambda n: f"/usr/bin/{n}"
                              if n == "docker" else None)
    assert facts.docker.server_version == "27.1.1" and facts.docker.runtimes == ("nvidia", "runc")


def test_a_busy_port_is_a_problem_naming_the_flag():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        facts = gather_host_facts(ports={"grpc": port}, run=lambda *a, **k: None,
                                  which=lambda n: None)
    ports = by_name(check_host(facts, load_profile("p100")))["ports"]
    assert not ports.ok and f"{port} (grpc)" in ports.detail and "--grpc-port" in ports.fix


def test_a_port_that_cannot_be_bound_is_named_with_the_reason_not_as_in_use():
    facts = gather_host_facts(host="192.0.2.1", ports={"http": 8000},   # not this host's
                              run=lambda *a, **k: None, which=lambda n: None)
    ports = by_name(check_host(facts, load_profile("p100")))["ports"]
    assert not ports.ok and "8000 (http) cannot assign requested address" in ports.detail
    assert "in use" not in ports.detail


def test_the_repository_check_parses_configs_and_names_mismatches(example_repository, tmp_path):
    assert check_repository(example_repository).ok
    config = example_repository / "example" / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "example"', 'name: "other"'))
    bad = check_repository(example_repository)
    assert not bad.ok and "names the model 'other'" in bad.detail
    assert not check_repository(tmp_path / "missing").ok


def test_doctor_runs_on_this_host_and_prints_one_line_per_check(example_repository, tmp_path,
                                                                capsys):
    out = tmp_path / "doctor.json"
    run_cli("doctor", "--gpu", "p100", "--repository", example_repository,
            "--http-port", "1", "--grpc-port", "2", "--metrics-port", "3", "--json", out)
    data = json.loads(out.read_text())
    names = [c["name"] for c in data["checks"]]
    assert names[:2] == ["driver", "image"] and "repository" in names
    printed = capsys.readouterr().out
    assert all(line.startswith(("ok", "warning", "problem")) for line in printed.splitlines() if line)


def test_doctor_exits_zero_on_a_host_that_passes_and_one_on_a_host_that_does_not(
        example_repository, tmp_path, monkeypatch, capsys):
    from tritonkit.monitor import doctor

    def run_on(facts: HostFacts, out):
        monkeypatch.setattr(doctor, "gather_host_facts", lambda *args, **kwargs: facts)
        code = run_cli("doctor", "--gpu", "p100", "--repository", example_repository,
                       "--json", out)
        return code, json.loads(out.read_text())

    code, data = run_on(host(), tmp_path / "ready.json")            # a P100 on 535.104.05
    assert code == 0 and data["ok"] and data["warnings"] == []
    code, data = run_on(host(driver="530.30.02"), tmp_path / "old-driver.json")
    assert code == 1 and not data["ok"]
    assert [c["name"] for c in data["checks"] if c["status"] == "problem"] == ["driver"]
    assert "1 of" in capsys.readouterr().err


def test_a_warning_is_printed_as_one_not_as_ok_and_does_not_fail_the_host(
        example_repository, monkeypatch, capsys):
    from tritonkit.monitor import doctor

    monkeypatch.setattr(doctor, "gather_host_facts", lambda *args, **kwargs: host())
    code = run_cli("doctor", "--gpu", "p100", "--repository", example_repository,
                   "--image", IMAGE.format("24.09"))       # a release whose driver is unrecorded
    printed = capsys.readouterr().out.splitlines()
    assert code == 0
    assert [line.split()[:2] for line in printed if " driver " in f" {line} "] == [
        ["warning", "driver"]]


def test_doctor_keeps_an_existing_json_report_unless_force(example_repository, tmp_path, capsys):
    out = tmp_path / "doctor.json"
    out.write_text("earlier\n")
    args = ("doctor", "--repository", example_repository, "--http-port", "1", "--grpc-port", "2",
            "--metrics-port", "3", "--json", out)
    assert run_cli(*args) == 2
    assert "already exists" in capsys.readouterr().err and out.read_text() == "earlier\n"
    run_cli(*args, "--force")
    assert "checks" in json.loads(out.read_text())


def test_doctor_checks_the_default_repository_only_where_there_is_one(example_repository, tmp_path,
                                                                      monkeypatch):
    bare = tmp_path / "bare-host"
    bare.mkdir()
    monkeypatch.chdir(bare)
    ports = ("--http-port", "1", "--grpc-port", "2", "--metrics-port", "3")
    run_cli("doctor", "--gpu", "a10", *ports, "--json", bare / "a.json")
    assert "repository" not in [c["name"] for c in json.loads((bare / "a.json").read_text())["checks"]]
    shutil.copytree(example_repository, bare / "model_repository")
    run_cli("doctor", "--gpu", "a10", *ports, "--json", bare / "b.json")
    checks = {c["name"]: c for c in json.loads((bare / "b.json").read_text())["checks"]}
    assert checks["repository"]["ok"] and "1 model(s)" in checks["repository"]["detail"]
    run_cli("doctor", "--gpu", "a10", *ports, "--repository", bare / "missing", "--json", bare / "c.json")
    checks = {c["name"]: c for c in json.loads((bare / "c.json").read_text())["checks"]}
    assert not checks["repository"]["ok"]


# --- the image table (configs/triton_images.toml) --------------------------------------------

IMAGE = "nvcr.io/nvidia/tritonserver:{}-py3"


def test_p100_with_the_24_04_image_refuses_a_530_driver_and_names_the_upgrade_that_works():
    # 24.04's release notes: CUDA 12.4 requires 545; on a data-center GPU 470.57, 525.85,
    # 535.86 or 545.23; R530 is none of them (CUDA 12's own floor, 525, is not the image's)
    p100 = load_profile("p100")
    driver = by_name(check_host(host(driver="530.30.02"), p100, image=IMAGE.format("24.04")))["driver"]
    assert not driver.ok and "older than 545 (CUDA 12" in driver.detail
    assert "R530 is not forward-compatible" in driver.detail
    assert driver.fix == ("upgrade the NVIDIA driver to ≥ 545.23, or on a data-center GPU to a "
                          "forward-compatible R535 ≥ 535.86")
    # the upgrades it names run the image, and the first R545 before 545.23 does not
    for upgrade in ("535.86.05", "545.23.08", "550.54.15"):
        assert _driver_ok(upgrade, p100, IMAGE.format("24.04")), upgrade
    assert not _driver_ok("545.22.01", p100, IMAGE.format("24.04"))


def test_24_12_refuses_a_555_driver_which_its_release_notes_call_not_forward_compatible():
    driver = by_name(check_host(host(driver="555.42.02"), load_profile("p100"),
                                image=IMAGE.format("24.12")))["driver"]
    assert not driver.ok and "older than 560 (CUDA 12" in driver.detail
    assert "R555 is not forward-compatible" in driver.detail
    assert driver.fix.startswith("upgrade the NVIDIA driver to ≥ 560")


def test_a_tag_the_table_does_not_record_is_unknown_a_warning_never_an_ok_or_a_failure():
    p100 = load_profile("p100")
    for image in (IMAGE.format("23.12"),                             # no row
                  IMAGE.format("24.09"),                             # a row without a driver
                  "nvcr.io/nvidia/tritonserver:24.10-trtllm-python-py3"):  # another CUDA
        checks = check_host(host(), p100, image=image)
        driver = by_name(checks)["driver"]
        assert driver.status == "warning" and driver.warning, image
        assert driver.detail.startswith("unknown: check its release notes"), image
        assert "triton_images.toml" in driver.fix
        report = checks_to_json(checks)
        assert report["warnings"] == ["driver"]
        assert {"name": "driver", "status": "warning"}.items() <= report["checks"][0].items()
    # a CUDA 13 release whose driver is unrecorded (25.11) is unknown too; where a CUDA 13 row
    # records one (25.10: CUDA 13's 580, not the 575 of the notes' CUDA 12 text), 575 fails
    a10 = host(driver="575.51.03", gpus=((0, "NVIDIA A10", 8.6),))
    assert by_name(check_host(a10, load_profile("a10"), image=IMAGE.format("25.11")))[
        "driver"].status == "warning"
    assert by_name(check_host(a10, load_profile("a10"), image=IMAGE.format("25.10")))[
        "driver"].status == "problem"


def test_the_profiles_own_images_agree_with_the_table():
    releases = load_image_releases()
    p100 = load_profile("p100")
    row = releases["24.10"]
    assert (row.driver, row.forward_compatible) == (p100.stack.image_driver,
                                                    ("470.57", "525.85", "535.86", "545.23"))
    needs = image_needs(p100.stack.triton_image, p100)
    assert needs.forward_compatible == {470: (470, 57), 525: (525, 85), 535: (535, 86),
                                        545: (545, 23)}
    for name in ("p100", "a10"):
        stack = load_profile(name).stack
        key = stack.triton_image.rsplit(":", 1)[1].removesuffix("-py3")
        assert releases[key].onnxruntime == stack.onnxruntime_server, name
    # every release the project meets, 24.04 to 25.12, has a row; every driver its source
    assert sorted(releases) == [f"{y}.{m:02d}" for y in (24, 25) for m in range(1, 13)
                                if (y, m) >= (24, 4)]
    assert all(r.source.startswith("https://") for r in releases.values() if r.driver)


def test_a_bad_row_in_the_image_table_names_the_file_and_the_field(tmp_path):
    from tritonkit.errors import ProfileError

    row = image_releases_path().read_text()
    cases = [('driver = 545\n', 'driver = "545"\n', "'releases.24.04.driver' = '545' must be an integer"),
             ('driver = 545\n', 'driver = 470\n', "'releases.24.04.driver' = 470 is below 525"),
             ('"545.23"]\nonnxruntime = "1.17.3"', '"555.42"]\nonnxruntime = "1.17.3"',
              "'releases.24.04.forward_compatible' = [") ,
             ('cuda = "12.4"\n', 'cuda = "12.4"\ncudnn = "9"\n', "unknown field 'releases.24.04.cudnn'")]
    for old, new, message in cases:
        bad = tmp_path / "triton_images.toml"
        bad.write_text(row.replace(old, new, 1))
        try:
            load_image_releases(bad)
        except ProfileError as exc:
            assert exc.message.startswith(f"{bad}: ") and message in exc.message, exc.message
        else:
            raise AssertionError(f"accepted {new!r}")


def test_a_configs_folder_made_for_its_settings_alone_still_has_the_image_table(
        tmp_path, monkeypatch):
    """TRITONKIT_CONFIGS holds server.toml, alerts.toml and gpus/ (what a user tunes);
    without triton_images.toml in it doctor stopped at "does not exist"."""
    from tritonkit.monitor.doctor import image_releases_path, load_image_releases

    mine = tmp_path / "configs"
    shutil.copytree(ROOT / "configs", mine, ignore=shutil.ignore_patterns("triton_images.toml"))
    monkeypatch.setenv("TRITONKIT_CONFIGS", str(mine))
    assert image_releases_path() == ROOT / "configs" / "triton_images.toml"
    assert load_image_releases()["24.10"].driver == 560
    (mine / "triton_images.toml").write_text((ROOT / "configs" / "triton_images.toml").read_text())
    assert image_releases_path() == mine / "triton_images.toml"      # one given is used


def test_a_host_whose_every_gpu_is_another_users_is_not_told_to_install_the_driver():
    """The driver answered; the GPUs' handles were NO_PERMISSION. Doctor said "install
    NVIDIA driver >= 560" and "no NVIDIA GPU visible"."""
    from tests.monitor.conftest import _fake_pynvml, _raising
    from tritonkit.monitor.doctor import gather_host_facts

    fake = _fake_pynvml()
    fake.nvmlDeviceGetCount = lambda: 2
    fake.nvmlDeviceGetHandleByIndex = _raising("NO_PERMISSION")
    fake.nvmlSystemGetDriverVersion = lambda: "560.35.03"
    facts = gather_host_facts(nvml=Nvml(fake), run=lambda *a, **k: None, which=lambda tool: None)
    assert facts.driver_version == "560.35.03" and facts.driver_error is None
    checks = by_name(check_host(dataclasses.replace(host(driver="560.35.03", gpus=()),
                                                    gpu_faults=facts.gpu_faults),
                                load_profile("p100")))
    assert checks["driver"].ok and "gpu" not in checks
    assert [checks[f"gpu {i}"].status for i in (0, 1)] == ["warning", "warning"]


def test_doctor_json_names_the_profile_the_image_and_the_driver_it_requires(
        example_repository, monkeypatch, capsys):
    """A script reads what the host was judged against from `doctor --json -`, not from
    the lines' wording: the profile (given, or picked by the GPU found), the image and
    the driver that image requires (None where the table does not record it)."""
    from tritonkit.monitor import doctor

    def json_on(facts: HostFacts, *args: str) -> dict:
        monkeypatch.setattr(doctor, "gather_host_facts", lambda *a, **kw: facts)
        capsys.readouterr()
        run_cli("doctor", "--repository", example_repository, *args, "--json", "-")
        return json.loads(capsys.readouterr().out)

    p100 = load_profile("p100")
    data = json_on(host(), "--gpu", "p100")
    assert (data["profile"], data["image"], data["required_driver"]) == (
        "p100", p100.stack.triton_image, 560)
    assert data["ok"] and "checks" in data
    picked = json_on(host(driver="580.65.06", gpus=((0, "NVIDIA A10", 8.6),)))
    assert picked["profile"] == "a10" and picked["image"] == load_profile("a10").stack.triton_image
    assert picked["required_driver"] == image_needs(picked["image"], load_profile("a10")).image_driver
    unrecorded = json_on(host(), "--gpu", "p100", "--image", IMAGE.format("24.09"))
    assert (unrecorded["image"], unrecorded["required_driver"]) == (IMAGE.format("24.09"), None)
    nothing = json_on(host(gpus=()))
    assert (nothing["profile"], nothing["image"], nothing["required_driver"]) == (None, None, None)


def serve_a_plan_on_the_p100(repository):
    """The example model, given a P100 config that serves a TensorRT plan."""
    model = repository / "example"
    (model / "configs").mkdir()
    (model / "configs" / "p100.pbtxt").write_text((model / "config.pbtxt").read_text().replace(
        'backend: "python"', 'platform: "tensorrt_plan"'))


def test_a_repository_of_tensorrt_plans_is_checked_against_the_image_deploy_runs_them_in(
        example_repository, monkeypatch, capsys):
    """The P100's plans run in its TensorRT image (24.04, TensorRT 8.6), not its ONNX one
    (24.10): a 545 driver runs the first and not the second, so doctor must judge the
    host by the one deploy picks, and say it is that one."""
    from tritonkit.monitor import doctor

    serve_a_plan_on_the_p100(example_repository)
    monkeypatch.setattr(doctor, "gather_host_facts", lambda *a, **kw: host(driver="545.23.08"))
    capsys.readouterr()
    assert run_cli("doctor", "--gpu", "p100", "--repository", example_repository,
                   "--json", "-") == 0
    data = json.loads(capsys.readouterr().out)
    p100 = load_profile("p100")
    assert (data["image"], data["required_driver"]) == (p100.stack.triton_image_tensorrt, 545)
    checks = {c["name"]: c for c in data["checks"]}
    assert checks["driver"]["status"] == "ok"
    assert checks["image"]["detail"].startswith(p100.stack.triton_image_tensorrt)
    assert "TensorRT plans" in checks["image"]["detail"]

    # --image still wins, judged as deploy judges it: TensorRT 10 runs no plan on a P100
    run_cli("doctor", "--gpu", "p100", "--repository", example_repository,
            "--image", IMAGE.format("24.10"), "--json", "-")
    image = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}["image"]
    assert image["status"] == "problem" and "ships TensorRT 10" in image["detail"]


def test_a_repository_deploy_would_refuse_for_the_card_is_a_problem_doctor_names(
        example_repository):
    model = example_repository / "example"
    (model / "configs").mkdir()
    (model / "configs" / "a10.pbtxt").write_text((model / "config.pbtxt").read_text())
    checks = by_name(run_doctor(load_profile("p100"), host(), repository=example_repository))
    assert checks["repository"].ok
    assert not checks["deploy"].ok and "has no configs/p100.pbtxt" in checks["deploy"].detail
    assert checks["image"].detail.startswith(load_profile("p100").stack.triton_image)


# --- doctor: the repository's ONNX files ------------------------------------------------------

def _onnx_model(weights: int = 4096) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("INPUT__0", TensorProto.FLOAT, [-1, weights])
    y = helper.make_tensor_value_info("OUTPUT__0", TensorProto.FLOAT, [-1, weights])
    w = numpy_helper.from_array(np.arange(weights, dtype=np.float32), "w")
    graph = helper.make_graph([helper.make_node("Add", ["INPUT__0", "w"], ["OUTPUT__0"])],
                              "g", [x], [y], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _onnx_repository(root: Path, *names: str, **config) -> Path:
    for name in names:
        (root / name / "1").mkdir(parents=True)
        onnx.save(_onnx_model(), root / name / "1" / "model.onnx")
        (root / name / "config.pbtxt").write_text(
            f'name: "{name}"\n'
            + "".join(f'{key}: "{value}"\n' for key, value in
                      (config or {"backend": "onnxruntime"}).items())
            + "max_batch_size: 8\n")
    return root


def test_doctor_names_a_truncated_onnx_model_in_the_repository(tmp_path):
    repo = _onnx_repository(tmp_path / "repo", "broken", "mlp")
    model = repo / "broken" / "1" / "model.onnx"
    with model.open("r+b") as f:
        f.truncate(1000)
    out = tmp_path / "doctor.json"
    assert run_cli("doctor", "--gpu", "a10", "--repository", repo, "--json", out) == 1
    checks = {c["name"]: c for c in json.loads(out.read_text())["checks"]}
    repository = checks["repository"]
    assert repository["status"] == "problem"
    assert f"{model} cannot be read as ONNX" in repository["detail"]
    assert "truncated" in repository["detail"] and "--name broken" in repository["fix"]


def test_an_intact_onnx_repository_passes_and_says_its_files_read(tmp_path):
    repo = _onnx_repository(tmp_path / "repo", "mlp", platform="onnxruntime_onnx")
    check = check_repository(repo)
    assert check.ok and "1 ONNX file(s) read" in check.detail


def test_a_model_with_its_weights_in_external_data_is_not_refused(tmp_path):
    """The weights beside the model (onnx's external data) are neither opened nor read."""
    repo = _onnx_repository(tmp_path / "repo", "big")
    path = repo / "big" / "1" / "model.onnx"
    onnx.save(_onnx_model(), path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=0)
    assert (path.parent / "weights.bin").stat().st_size > path.stat().st_size
    assert onnx_file_problem(path) is None and check_repository(repo).ok


def test_onnx_files_that_are_not_models_are_named_with_why(tmp_path):
    path = tmp_path / "model.onnx"
    path.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 9\n")
    assert "Git LFS pointer" in onnx_file_problem(path)
    path.write_text('name: "mlp"\nbackend: "onnxruntime"\n')      # a config, not a model
    assert "not an ONNX file" in onnx_file_problem(path)
    path.write_bytes(b"")
    assert "no graph" in onnx_file_problem(path)
    model = _onnx_model()
    data = model.SerializeToString()
    opset = 2 + len(model.opset_import[0].SerializeToString())   # the last field, and its header
    path.write_bytes(data[:-2])                                   # cut inside it
    assert "inside field 8" in onnx_file_problem(path)
    path.write_bytes(data[:-opset])                               # cut just before it
    assert "no opset_import" in onnx_file_problem(path)
    path.write_bytes(data[:-opset - 1])                           # the graph's last byte
    assert "inside its graph" in onnx_file_problem(path)


def test_a_model_without_an_onnx_backend_is_not_read_as_onnx(example_repository):
    """The example is a python model: no model.onnx to read, and the check passes."""
    (example_repository / "example" / "1" / "model.onnx").write_bytes(b"\xff\xff not onnx")
    check = check_repository(example_repository)
    assert check.ok and "ONNX" not in check.detail


# --- doctor: the ports of the repository's own deployment -------------------------------------

def test_ports_held_by_the_repository_s_deployment_are_a_warning_and_others_a_problem():
    ours = PortFact("http", 8000, free=False, problem="in use", held_by_deployment="/srv/repo")
    check = _check_ports((ours, PortFact("grpc", 8001, free=True)))
    assert check.ok and check.warning
    assert "running deployment (/srv/repo): 8000 (http)" in check.detail
    assert "tritonkit down --repository /srv/repo" in check.fix
    foreign = PortFact("metrics", 8002, free=False, problem="in use")
    mixed = _check_ports((ours, foreign))
    assert not mixed.ok and "8002 (metrics) in use" in mixed.detail
    assert "8000 (http)" in mixed.detail and "--metrics-port N" in mixed.fix


@pytest.mark.server
def test_doctor_tells_its_own_running_deployment_from_a_port_conflict(example_server, tmp_path):
    ports = ["--http-port", example_server.http_port, "--grpc-port", example_server.grpc_port,
             "--metrics-port", example_server.metrics_port]
    repository = Path(example_server.repository)
    out = tmp_path / "doctor.json"
    run_cli("doctor", "--gpu", "a10", "--repository", repository, *ports, "--json", out)
    checks = {c["name"]: c for c in json.loads(out.read_text())["checks"]}
    assert checks["ports"]["status"] == "warning"
    assert f"in use by this repository's running deployment ({repository})" in \
        checks["ports"]["detail"]
    assert f"tritonkit down --repository {repository}" in checks["ports"]["fix"]

    # another repository on the same ports: what holds them is not its deployment
    other = tmp_path / "other"
    shutil.copytree(repository / "example", other / "example")
    run_cli("doctor", "--gpu", "a10", "--repository", other, *ports, "--json", out,
            "--force")
    checks = {c["name"]: c for c in json.loads(out.read_text())["checks"]}
    assert checks["ports"]["status"] == "problem"
    assert f"{example_server.http_port} (http) in use" in checks["ports"]["detail"]
