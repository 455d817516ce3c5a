"""The suite's own machinery for pytest-xdist (tests/conftest.py), run on small suites of
its own: what workers make once, a timing test alone on the machine, the `server` marker
checked, and a worker's environment as the run's."""

from __future__ import annotations

import json
import os
import resource
import textwrap

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow        # each starts a pytest of its own, with workers


@pytest.fixture
def suite(pytester, monkeypatch):
    """A pytest run of its own on files written here, with tests/conftest.py as its plugin;
    returns a function that writes them and runs it, ``args`` given to pytest."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)

    def run(files: dict[str, str], *args: str):
        pytester.makeconftest('pytest_plugins = ["tests.conftest"]\n' + files.pop("conftest", ""))
        pytester.makepyfile(**{name: textwrap.dedent(text) for name, text in files.items()})
        pytester.makeini("[pytest]\nmarkers =\n    server\n    slow\n    timing\n    quick\n"
                         "    engine\n    gpu\n    alone\n")
        return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=300)
    return run


def test_what_workers_make_once_is_made_once_and_undone_once_when_the_run_ends(suite, tmp_path):
    log = tmp_path / "log"
    result = suite({
        "conftest": textwrap.dedent(f"""
            from tests.conftest import OncePerRun
            import pathlib, pytest

            def make(folder):
                with open({str(log)!r}, "a") as f:
                    f.write("made\\n")
                return {{"folder": str(folder)}}

            def undo(made):
                with open({str(log)!r}, "a") as f:
                    f.write("undone " + made["folder"] + "\\n")

            ENGINE = OncePerRun("engine", make, undo)

            @pytest.fixture
            def engine(tmp_path_factory):
                return ENGINE.get(tmp_path_factory)
            """),
        "test_uses": """
            import pytest

            @pytest.mark.parametrize("i", range(6))
            def test_uses(engine, i):
                assert engine["folder"]
            """}, "-n", "3")
    result.assert_outcomes(passed=6)
    made, undone = log.read_text().splitlines()
    assert made == "made" and undone.startswith("undone ")


def test_a_make_that_failed_fails_every_worker_that_asks_without_trying_again(suite, tmp_path):
    log = tmp_path / "log"
    result = suite({
        "conftest": textwrap.dedent(f"""
            from tests.conftest import OncePerRun
            import pytest

            def make(folder):
                with open({str(log)!r}, "a") as f:
                    f.write("tried\\n")
                raise RuntimeError("no engine here")

            ENGINE = OncePerRun("engine", make)

            @pytest.fixture
            def engine(tmp_path_factory):
                return ENGINE.get(tmp_path_factory)
            """),
        "test_uses": """
            import pytest

            @pytest.mark.parametrize("i", range(4))
            def test_uses(engine, i):
                pass
            """}, "-n", "2")
    result.assert_outcomes(errors=4)
    assert log.read_text() == "tried\n"
    result.stdout.fnmatch_lines(["*RuntimeError: no engine here*"])


def test_a_costly_package_fixture_is_made_once_for_its_tests_in_every_file_of_the_package(
        suite, tmp_path):
    """Its tests go to one worker, grouped by the package (not each file's group, whose
    workers would each start the server)."""
    log = tmp_path / "log"
    uses = """
        import pytest

        @pytest.mark.parametrize("i", range(3))
        def test_uses(served, i):
            pass
        """
    result = suite({
        "pkg/__init__": "",
        "pkg/conftest": f"""
            import pytest

            @pytest.fixture(scope="package")
            def served():
                with open({str(log)!r}, "a") as f:
                    f.write("made\\n")
            """,
        "pkg/test_a": uses, "pkg/test_b": uses}, "-n", "2", "--dist", "loadgroup", "-v")
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(["*pkg/test_a.py::test_uses?0?@pkg.served*",
                                 "*pkg/test_b.py::test_uses?2?@pkg.served*"], consecutive=False)
    assert log.read_text() == "made\n"


def test_the_timing_tests_sharing_a_package_server_run_first_one_after_another(suite):
    """As a module's do: their worker takes the machine once for them, on a fresh server."""
    result = suite({
        "pkg/__init__": "",
        "pkg/conftest": """
            import pytest

            @pytest.fixture(scope="package")
            def served():
                pass
            """,
        "pkg/test_a": """
            import pytest

            def test_plain(served): pass

            @pytest.mark.timing
            def test_timed_a(served): pass
            """,
        "pkg/test_b": """
            import pytest

            @pytest.mark.timing
            def test_timed_b(served): pass
            """}, "--collect-only", "-q")
    result.stdout.fnmatch_lines(["pkg/test_a.py::test_timed_a", "pkg/test_b.py::test_timed_b",
                                 "pkg/test_a.py::test_plain"], consecutive=True)


@pytest.mark.parametrize("marker", ["timing", "alone"])
def test_a_timing_test_runs_while_no_other_test_of_the_run_does(suite, tmp_path, marker):
    """And an `alone` one: a load whose work would double beside other tests'. From its
    call on; from its set-up on where that set-up warms a server until steady (a timing
    fixture, here `warm_server`)."""
    spans = tmp_path / "spans"
    spans.mkdir()
    test = _span_code(spans, 0.3) + f"""

        @pytest.fixture
        def warm_server(request):
            span("timing-setup-" + request.node.name)

        @pytest.mark.parametrize("i", range(8))
        def test_other(i):
            span(f"other{{i}}")

        @pytest.mark.{marker}
        @pytest.mark.parametrize("i", range(3))
        def test_timing(i):
            span(f"timing{{i}}")

        @pytest.mark.{marker}
        def test_timing_warmed(warm_server):
            span("timing-warmed")
        """
    suite({"test_spans": test}, "-n", "3", "--dist", "loadgroup").assert_outcomes(passed=12)
    times = _spans(spans)
    assert len(times) == 13
    for name in times:
        if name.startswith("timing"):
            beside = _overlapping(times, name)
            assert beside == [], f"{name} ran beside {beside}"


@pytest.mark.server
def test_a_test_that_starts_tritonserver_without_the_server_marker_fails(suite):
    test = """
        import shutil
        import pytest
        from tests.conftest import EXAMPLE_REPOSITORY, run_cli

        def deploy_and_down(tmp_path):
            repo = tmp_path / "repo"
            shutil.copytree(EXAMPLE_REPOSITORY, repo)
            assert run_cli("deploy", "--repository", repo, "--http-port", "0", "--grpc-port",
                           "0", "--metrics-port", "0", "--no-warmup") == 0
            assert run_cli("down", "--repository", repo) == 0

        def test_unmarked(tmp_path):
            deploy_and_down(tmp_path)

        @pytest.mark.server
        def test_marked(tmp_path):
            deploy_and_down(tmp_path)

        def test_no_server():
            pass
        """
    result = suite({"test_deploys": test}, "-n", "2")
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_unmarked*",
                                 "*started a tritonserver without the `server` marker*"])


def test_the_quick_tier_is_every_test_that_is_no_server_engine_slow_or_gpu_test(suite):
    test = """
        import pytest

        def test_plain(): pass

        def test_deployed(deployed): pass

        @pytest.mark.slow
        def test_slow(): pass

        @pytest.mark.engine
        def test_engine(): pass
        """
    result = suite({"test_tiers": test}, "--collect-only", "-q", "-m", "quick")
    result.stdout.fnmatch_lines(["test_tiers.py::test_plain", "1/4 tests collected*"])


def test_a_worker_sees_the_terminal_size_the_run_was_started_with(suite):
    """readline (imported with pytest's debugger) puts COLUMNS=80 into the process's C
    environment: a worker started without it got it, and a table 80 columns wide."""
    test = """
        import os, subprocess

        def test_no_columns():
            assert "COLUMNS" not in os.environ
            assert subprocess.run(["sh", "-c", 'echo "[$COLUMNS]"'], capture_output=True,
                                  text=True).stdout == "[]\\n"
        """
    suite({"test_env": test}, "-n", "1").assert_outcomes(passed=1)


ORDERED = {
    "test_order": """
        import time
        import pytest

        def test_short(): time.sleep(0.01)

        def test_long(): time.sleep(0.3)

        @pytest.mark.timing
        def test_timed(): pass

        @pytest.mark.xdist_group("shared")
        def test_grouped_first(): pass

        @pytest.mark.xdist_group("shared")
        def test_grouped_second(): pass
        """}


def test_a_run_stores_each_tests_seconds_and_the_next_hands_out_the_longest_first(suite, pytester):
    """The timing test's unit first (it then waits on no long test), then the longest; a
    group's tests keep their order."""
    first = suite(dict(ORDERED), "-p", "no:xdist", "--store-durations")
    first.assert_outcomes(passed=5)
    stored = json.loads((pytester.path / "tests" / "durations.json").read_text())
    assert stored["test_order.py::test_long"] >= 0.3 > stored["test_order.py::test_short"]
    stored["test_order.py::test_grouped_second"] = 1.0     # the group's sum: 1 s and more
    (pytester.path / "tests" / "durations.json").write_text(json.dumps(stored))
    collected = suite(dict(ORDERED), "--collect-only", "-q", "-n", "2", "--dist", "loadgroup")
    collected.stdout.fnmatch_lines(["test_order.py::test_timed*",
                                    "test_order.py::test_grouped_first*",
                                    "test_order.py::test_grouped_second*",
                                    "test_order.py::test_long*",
                                    "test_order.py::test_short*"], consecutive=True)



ON_IDLE_CORES = pytest.mark.skipif(
    os.geteuid() != 0 and resource.getrlimit(resource.RLIMIT_NICE)[0] < 20,
    reason="a worker here could not take its priority back")


def _policy_notes(log) -> str:
    return f"""
        import os, pathlib, subprocess, sys, threading, time, pytest

        def note(what, policy):
            with open({str(log)!r}, "a") as f:
                f.write(f"{{what}} {{policy}}\\n")
        """


@ON_IDLE_CORES
def test_an_export_test_beside_a_timing_test_runs_on_idle_cores_and_its_worker_takes_its_priority_back(
        suite, tmp_path):
    """An export test (EXPORT_MODULES, no server) that runs while a timing test does gets
    SCHED_IDLE, a thread it starts and a command it runs too; a server test and a plain
    one, as the worker ran before."""
    log = tmp_path / "policy"
    log.touch()
    running, ended = tmp_path / "timed-running", tmp_path / "timed-ended"
    exporting = """
        def test_export_{0}():
            deadline = time.monotonic() + 60        # the timed test starts, or it ran first
            while not any(pathlib.Path(p).exists() for p in ({1!r}, {2!r})):
                assert time.monotonic() < deadline, "the timed test never started"
                time.sleep(0.05)
            beside = pathlib.Path({1!r}).exists()
            t = threading.Thread(target=lambda: note("{0}-thread", f"{{beside}}:{{os.sched_getscheduler(0)}}"))
            t.start(); t.join()
            note("{0}-export", f"{{beside}}:{{os.sched_getscheduler(0)}}")
            command = [sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"]
            done = subprocess.run(command, capture_output=True, text=True).stdout.strip()
            note("{0}-command", f"{{beside}}:{{done}}")
        """
    result = suite({"test_export": _policy_notes(log) + "".join(
        exporting.format(name, str(running), str(ended)) for name in ("a", "b")) + """
        @pytest.mark.server
        def test_served():
            note("served", os.sched_getscheduler(0))
        """, "test_plain": _policy_notes(log) + f"""
        def test_plain():
            note("plain", os.sched_getscheduler(0))

        @pytest.mark.timing
        def test_timed():
            pathlib.Path({str(running)!r}).touch()
            try:
                deadline = time.monotonic() + 60
                while "-command True:" not in pathlib.Path({str(log)!r}).read_text():
                    assert time.monotonic() < deadline, "no export test ran beside"
                    time.sleep(0.05)
            finally:
                pathlib.Path({str(ended)!r}).touch()
                pathlib.Path({str(running)!r}).unlink()
        """}, "-n", "2", "--dist", "loadgroup")
    result.assert_outcomes(passed=5)
    seen = dict(line.split(" ", 1) for line in log.read_text().splitlines())
    idle, base = os.SCHED_IDLE, os.sched_getscheduler(0)
    beside = [name for name in ("a", "b") if seen[f"{name}-export"].startswith("True:")]
    assert beside, seen
    for name in beside:
        assert [seen[f"{name}-{what}"] for what in ("thread", "export", "command")] == [
            f"True:{idle}"] * 3
    assert (seen["served"], seen["plain"]) == (str(base), str(base))


def test_an_export_test_after_the_alone_tests_runs_as_any_other(suite, tmp_path):
    """Once the run's `alone` tests are done, nothing needs the cores kept free: an export
    test at idle priority beside busy workers only waited (one took 76 s for 4 CPU s at a
    run's end)."""
    log = tmp_path / "policy"
    log.touch()
    note = _policy_notes(log)
    result = suite({"test_export": note + """
        @pytest.mark.slow
        def test_export():
            note("export", os.sched_getscheduler(0))
        """, "test_timed": note + """
        @pytest.mark.timing
        def test_timed():
            note("timed", os.sched_getscheduler(0))
        """}, "-n", "1", "--dist", "loadgroup")
    result.assert_outcomes(passed=2)
    base = str(os.sched_getscheduler(0))
    assert log.read_text().splitlines() == [f"timed {base}", f"export {base}"]


@ON_IDLE_CORES
def test_an_export_test_runs_while_a_timing_test_does(suite, tmp_path):
    """Each waits until it sees the other running: were the export test held back until
    the timing test ended, neither would, and both would fail."""
    marks = tmp_path / "marks"
    marks.mkdir()
    common = f"""
        import pathlib, time
        import pytest

        def meet(me, other):
            pathlib.Path({str(marks)!r}, me).touch()
            deadline = time.monotonic() + 60
            while not pathlib.Path({str(marks)!r}, other).exists():
                assert time.monotonic() < deadline, f"{{other}} did not run beside {{me}}"
                time.sleep(0.05)
        """
    result = suite({
        "test_timed": common + """
        @pytest.mark.timing
        def test_timed():
            meet("timed", "export")
        """,
        "test_export": common + """
        @pytest.mark.slow
        def test_exports():
            meet("export", "timed")
        """}, "-n", "2", "--dist", "loadgroup")
    result.assert_outcomes(passed=2)


def test_the_alone_tests_are_handed_out_first_then_the_export_tests_then_the_rest(suite):
    """The export tests run beside the alone ones: handed out while those run, not after
    the longer tests that would wait for them. Of the alone ones, those that take both
    cores (no timing tests) last: the timing tests leave cores idle for the exports."""
    collected = suite({
        "test_export": """
        def test_quick_export(): pass
        """,
        "test_other": """
        import pytest

        @pytest.mark.slow
        @pytest.mark.server
        def test_long_served(): pass

        @pytest.mark.alone
        def test_alone(): pass

        @pytest.mark.timing
        def test_timed(): pass
        """}, "--collect-only", "-q", "-n", "2", "--dist", "loadgroup")
    collected.stdout.fnmatch_lines(["test_other.py::test_timed*",
                                    "test_other.py::test_alone*",
                                    "test_export.py::test_quick_export*",
                                    "test_other.py::test_long_served*"], consecutive=True)


def test_an_export_test_waits_while_an_alone_test_that_takes_both_cores_runs(suite, tmp_path):
    """Beside the timing tests an export test takes the cores they leave idle; beside an
    alone test that takes both (a repository of full-size models warmed until steady) it
    only doubled that test's work. Both start at once here; neither's call overlaps."""
    spans = tmp_path / "spans"
    spans.mkdir()
    span = _span_code(spans, 0.5)
    result = suite({
        "test_hog": span + """
        @pytest.mark.alone
        def test_hog():
            span("hog")
        """,
        "test_export": span + """
        @pytest.mark.parametrize("i", range(3))
        def test_export(i):
            span(f"export{i}")
        """}, "-n", "2", "--dist", "loadgroup")
    result.assert_outcomes(passed=4)
    times = _spans(spans)
    assert len(times) == 4
    beside = _overlapping(times, "hog")
    assert beside == [], f"the hog's call ran beside {beside}"


def _span_code(spans, seconds: float) -> str:
    """A test file's start: ``span(name)`` sleeps ``seconds`` and writes when it started and
    ended into ``spans``/name."""
    return f"""
        import json, os, pathlib, time
        import pytest

        def span(name):
            started = time.monotonic()
            time.sleep({seconds})
            pathlib.Path({str(spans)!r}, name).write_text(json.dumps([started, time.monotonic()]))
        """


def _spans(spans) -> dict[str, list[float]]:
    return {path.name: json.loads(path.read_text()) for path in spans.iterdir()}


def _overlapping(times: dict[str, list[float]], name: str) -> list[str]:
    start, end = times[name]
    return [other for other, (s, e) in times.items() if other != name and s < end and start < e]
