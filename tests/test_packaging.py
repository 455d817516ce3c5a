"""An installed tritonkit (a wheel, not this checkout) has what it reads at run time."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from tests.conftest import ROOT
from tritonkit.datafiles import load_toml


def test_the_wheel_lists_every_package_of_the_source_tree():
    """The packages are listed in pyproject.toml (configs/ is mapped in): a new subpackage
    left out of the list would be missing from every install but this checkout."""
    listed = set(load_toml(ROOT / "pyproject.toml")["tool"]["setuptools"]["packages"])
    found = {".".join(init.parent.relative_to(ROOT).parts)
             for init in (ROOT / "tritonkit").rglob("__init__.py")}
    configs = {"tritonkit.configs", *("tritonkit.configs." + ".".join(d.relative_to(ROOT / "configs").parts)
                                      for d in (ROOT / "configs").rglob("*") if d.is_dir())}
    assert listed == found | configs


@pytest.mark.slow
def test_a_tritonkit_installed_from_its_wheel_reads_the_profiles_and_settings_inside_it(tmp_path):
    """A non-editable install carried no configs/: every command that reads a profile or the
    server settings failed there ("configuration file ... does not exist")."""
    source = tmp_path / "source"            # a clean copy: no build/ of an earlier build
    for part in ("tritonkit", "configs"):
        shutil.copytree(ROOT / part, source / part, ignore=shutil.ignore_patterns("__pycache__"))
    for part in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / part, source / part)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path), str(source)], check=True, capture_output=True)
    [wheel] = tmp_path.glob("tritonkit-*.whl")
    installed = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(installed)
    for source in (ROOT / "configs").rglob("*.toml"):
        copy = installed / "tritonkit" / "configs" / source.relative_to(ROOT / "configs")
        assert copy.read_bytes() == source.read_bytes(), copy

    env = {k: v for k, v in os.environ.items() if k != "TRITONKIT_CONFIGS"}
    env["PYTHONPATH"] = str(installed)
    probe = ("import tritonkit; from tritonkit.datafiles import configs_dir; "
             "from tritonkit.profiles import available_profiles, load_profile; "
             "from tritonkit.server.settings import load_server_settings; "
             "from tritonkit.monitor.alerts import load_thresholds; "
             "load_server_settings(); load_thresholds(); "
             "print(tritonkit.__file__, configs_dir(), available_profiles(), "
             "load_profile('p100').display_name, sep='|')")
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, check=True,
                         capture_output=True, text=True).stdout.strip().split("|")
    assert out[0] == str(installed / "tritonkit" / "__init__.py")     # not this checkout
    assert out[1] == str(installed / "tritonkit" / "configs")
    assert out[2] == str(sorted(p.stem for p in (ROOT / "configs" / "gpus").glob("*.toml")))
    assert out[3] == "Tesla P100 PCIe 16 GB"
