"""The documentation site: every command has a page that names each of its flags, and the
site builds with `mkdocs build --strict` (broken links, missing pages and bad API
references fail it). The flag lists come from the Typer app itself, so they cannot drift."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import typer.main

from tests.conftest import ROOT
from tritonkit.cli import app
from tritonkit.datafiles import load_toml

DOCS = ROOT / "docs"
README_MOST_LINES = 150


def _commands() -> dict:
    """Click's commands behind the Typer app (typer vendors its own click: duck-typed)."""
    return dict(typer.main.get_command(app).commands)


def _flags(command) -> list[str]:
    """Every spelling of every option (``-r``, ``--repository``, ``--no-verify``), not --help."""
    flags = []
    for param in command.params:
        if param.param_type_name == "option":
            flags += [flag for flag in (*param.opts, *param.secondary_opts) if flag != "--help"]
    return flags


def _mentions(text: str, flag: str) -> bool:
    """The flag as a word of its own: --url is not found inside --grpc-url."""
    return re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text) is not None


def test_the_flag_lists_come_from_the_cli():
    """A guard for the test below: it checks real flags, not an empty list."""
    commands = _commands()
    assert {"export", "deploy", "loadtest"} <= set(commands)
    assert "--sla-p99-ms" in _flags(commands["loadtest"])
    assert "--no-verify" in _flags(commands["export"])
    assert not _mentions("--grpc-url", "--url")


@pytest.mark.parametrize("name", sorted(_commands()))
def test_every_flag_of_a_command_appears_in_its_page(name):
    page = DOCS / "commands" / f"{name}.md"
    assert page.is_file(), f"no page for `tritonkit {name}`: write {page.relative_to(ROOT)}"
    text = page.read_text(encoding="utf-8")
    missing = [flag for flag in _flags(_commands()[name]) if not _mentions(text, flag)]
    assert not missing, f"{page.relative_to(ROOT)} does not mention {', '.join(missing)}"


def test_every_command_page_is_in_the_site_navigation():
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    missing = [name for name in _commands() if f"commands/{name}.md" not in config]
    assert not missing, f"mkdocs.yml's nav lists no page for: {', '.join(missing)}"


def test_the_readme_is_short_and_links_the_docs():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MOST_LINES, f"README.md has {len(lines)} lines"
    linked = {path for line in lines for path in re.findall(r"\]\((docs/[^)#]+)", line)}
    assert linked, "README.md links no page of docs/"
    assert all((ROOT / path).exists() for path in linked), linked


def test_the_changelog_has_a_section_for_the_version_being_made():
    """Keep a Changelog's form: what is not released yet, then each version, newest first."""
    from tritonkit import __version__

    headings = re.findall(r"^## \[([^\]]+)\]", (ROOT / "CHANGELOG.md").read_text(encoding="utf-8"),
                          flags=re.MULTILINE)
    assert headings[0] == "Unreleased" and __version__ in headings, headings


def test_the_docs_extra_carries_what_the_site_is_built_with():
    extras = load_toml(ROOT / "pyproject.toml")["project"]["optional-dependencies"]
    names = {re.split(r"[\[<>=~!; ]", req, maxsplit=1)[0] for req in extras["docs"]}
    assert {"mkdocs", "mkdocs-material", "mkdocstrings"} <= names


@pytest.mark.slow
def test_the_site_builds_strict(tmp_path):
    """Warnings are errors: a link to a missing page or anchor, a page left out of the nav,
    a `::: tritonkit.x` reference to something that no longer exists."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-f",
         str(ROOT / "mkdocs.yml"), "-d", str(tmp_path / "site")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    assert (tmp_path / "site" / "commands" / "loadtest" / "index.html").is_file()
    api = (tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8")
    # mkdocstrings rendered the docstrings, not only the headings
    assert "one after the other" in api, "run_loadtest's docstring is not on the API page"
