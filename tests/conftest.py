"""Shared fixtures: a copy of a model repository, the real local tritonserver on free ports;
and what lets the suite run on several pytest-xdist workers at once (tiers, the `server`
marker checked, things made once per run, tests that need the machine to themselves)."""

from __future__ import annotations

import contextlib
import fcntl
import gc
import http.server
import importlib.util
import json
import os
import random
import resource
import shutil
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Callable, Iterator

import pytest
from filelock import FileLock

# PyTorch's OpenMP threads read this once, when torch loads (with the first test module that
# imports it): they sleep between operators instead of spinning on a core the other workers
# need, as `tritonkit export` sets it for its own runs.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from tritonkit.cli import main  # noqa: E402
from tritonkit.frames import from_a_roomy_frame  # noqa: E402
from tritonkit.server.state import load_deployment  # noqa: E402
from tritonkit.warmup import SteadyRule  # noqa: E402

pytest_plugins = ["pytester"]          # tests/test_parallel_workers.py runs suites of its own

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_REPOSITORY = ROOT / "model_repository"


def default_signals() -> None:
    """For a child the tests signal (``preexec_fn``): Ctrl-C, SIGTERM and SIGHUP at their
    defaults, as a terminal starts a command. A suite run in the background (``&``,
    ``nohup``) would hand it ignored ones, which a command rightly keeps ignoring."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


@pytest.fixture
def default_sigint():
    """The test process's own Ctrl-C handling as Python sets it up in a terminal."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def error_lines(err: str) -> list[str]:
    """A command's stderr from its error line on: what a slow phase said before it (a
    piped deploy's "waiting for the server…", on a busy host) is not the error."""
    lines = err.splitlines()
    return lines[next((i for i, line in enumerate(lines) if line.startswith("error: ")), 0):]


# A warm-up's steadiness rule for a test that is not about steadiness: beside nine other
# workers on two cores a request's latency jitters by milliseconds, and the default rule
# (five requests in a row within 1 ms or 25 % of their median) left a model unsteady after
# 1,000 requests in a busy run. Steadiness has tests of its own (tests/warmup/test_steadiness.py
# and the timing tests, which run alone).
BUSY_HOST_STEADY = ("--steady-tolerance", "1", "--steady-floor-ms", "10")
BUSY_HOST_RULE = SteadyRule(tolerance=1.0, floor_ms=10.0)      # the same, for warm_up()


def run_cli(*args: str) -> int:
    """Run the tritonkit CLI in-process and return its exit code."""
    return main([str(a) for a in args])


@pytest.fixture
def example_repository(tmp_path: Path) -> Path:
    """A private copy of model_repository/ (without any deployment state)."""
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLE_REPOSITORY, repo, ignore=shutil.ignore_patterns(".tritonkit", "__pycache__"))
    return repo


def _deploy_example(repository: Path):
    code = run_cli("deploy", "--repository", repository, "--http-port", "0",
                   "--grpc-port", "0", "--metrics-port", "0", "--timeout", "60")
    assert code == 0, "tritonkit deploy failed"
    return load_deployment(repository)


@pytest.fixture
def deployed(example_repository: Path):
    """The real embedded Triton serving the example repository on free loopback ports, for a
    test that changes it (stops it, loads models, edits its files or record)."""
    yield _deploy_example(example_repository)
    run_cli("down", "--repository", example_repository)


@pytest.fixture(scope="session")
def example_server(tmp_path_factory):
    """The example repository deployed once per worker, for tests that only read: ask it,
    infer, check what it listens on. A test that changes it takes ``deployed`` instead."""
    repository = tmp_path_factory.mktemp("example_server") / "repo"
    shutil.copytree(EXAMPLE_REPOSITORY, repository,
                    ignore=shutil.ignore_patterns(".tritonkit", "__pycache__"))
    yield _deploy_example(repository)
    run_cli("down", "--repository", repository)


@pytest.fixture
def spawned(monkeypatch) -> list[str]:
    """The names of the load-test worker processes started while the test runs."""
    from tritonkit.loadtest._pool import worker_context

    names: list[str] = []
    process = worker_context().Process
    start = process.start

    def counted(self):
        names.append(self.name)
        start(self)

    monkeypatch.setattr(process, "start", counted)
    return names


class _QuietServer(http.server.ThreadingHTTPServer):
    """A client that hung up is no traceback: socketserver prints one to ``sys.stderr``
    from the handler's thread, which a slow handler reaches when the next test on the
    worker captures stderr (and fails on "Traceback" in it)."""

    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


@contextlib.contextmanager
def http_peer(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """host:port of a loopback HTTP server answering with ``handler``, closed after."""
    server = _QuietServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def silent_listener() -> Iterator[tuple[str, Callable[[], bool]]]:
    """host:port of a socket that listens and answers nothing, and whether anything has
    connected to it yet. On 127.0.0.2, where no server of another test listens: a client of
    one, retrying a port its stopped server left, once reached it on 127.0.0.1."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.2", 0))
        listener.listen(8)
        listener.setblocking(False)

        def connected() -> bool:
            try:
                conn, _ = listener.accept()
            except BlockingIOError:
                return False
            conn.close()
            return True

        yield f"127.0.0.2:{listener.getsockname()[1]}", connected


@contextlib.contextmanager
def unasked_address() -> Iterator[str]:
    """host:port nothing may connect to: the test fails if anything did (a command that
    refuses bad input before it asks the server, whatever the host's speed)."""
    with silent_listener() as (address, connected):
        yield address
        assert not connected(), "something connected to the address: the server was asked"


def unused_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` ports nobody listens on, for a test that needs an address where no server
    answers (or a server of its own on ports it names). Picked below the kernel's ephemeral
    range, from which every server a test starts with port 0 takes its ports: a port picked
    there and left unbound was once taken meanwhile by another worker's Triton, which then
    answered the test (a secret refused where "taken down" was due)."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as ranges:
        low = int(ranges.read().split()[0])
    picked: list[int] = []
    with contextlib.ExitStack() as held:     # each stays bound until all are picked
        while len(picked) < count:
            port = random.randrange(10000, low)
            sock = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            try:
                sock.bind((host, port))
            except OSError:
                continue
            picked.append(port)
    return picked


def unused_port(host: str = "127.0.0.1") -> int:
    """One port nobody listens on (``unused_ports``)."""
    return unused_ports(1, host)[0]


def add_broken_model(repository: Path, name: str = "broken") -> Path:
    """A python-backend model whose model.py raises on import ('weights file is corrupt')."""
    broken = repository / name
    (broken / "1").mkdir(parents=True)
    (broken / "config.pbtxt").write_text(
        f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n'
        'input { name: "X" data_type: TYPE_FP32 dims: 1 }\n'
        'output { name: "Y" data_type: TYPE_FP32 dims: 1 }\n')
    (broken / "1" / "model.py").write_text("raise RuntimeError('weights file is corrupt')\n")
    return broken


def load_example_forward():
    """The example model's own forward function, imported from its model.py."""
    path = EXAMPLE_REPOSITORY / "example" / "1" / "model.py"
    spec = importlib.util.spec_from_file_location("example_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.forward


def add_python_model(repository: Path, name: str, config: str, model_py: str) -> Path:
    """A python-backend model ``name``: ``config`` is its config.pbtxt after the name and
    backend lines, ``model_py`` its 1/model.py."""
    model = repository / name
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(f'name: "{name}"\nbackend: "python"\n' + config)
    (model / "1" / "model.py").write_text(model_py)
    return model


def echo_model(*, initialize: str = "pass", execute: str = "pass") -> str:
    """A python-backend model.py that answers OUTPUT__0 = INPUT__0, running the Python
    statements ``initialize`` (one line or several, unindented) in initialize and
    ``execute`` in execute, before it answers."""
    import textwrap

    return f"""import os, signal, sys, time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
{textwrap.indent(initialize, " " * 8)}

    def execute(self, requests):
{textwrap.indent(execute, " " * 8)}
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(
            "OUTPUT__0", pb_utils.get_input_tensor_by_name(r, "INPUT__0").as_numpy())])
                for r in requests]
"""


ECHO_CONFIG = ('max_batch_size: 8\n'
               'input { name: "INPUT__0" data_type: TYPE_FP32 dims: 4 }\n'
               'output { name: "OUTPUT__0" data_type: TYPE_FP32 dims: 4 }\n')


# -- made once per run, shared by every worker ---------------------------------------------

def run_folder(tmp_path_factory) -> Path:
    """A folder every xdist worker of this run shares: the run's own base temp (a worker's
    is a folder inside it). Never pytest-of-<user>, which other runs on this host share."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


_ONCE: dict[str, "OncePerRun"] = {}


class OncePerRun:
    """Something costly that every worker of a run shares, made by the first one to ask (a
    Docker engine started, an image built, a model exported): ``make(folder)`` runs once,
    under a file lock, and returns what the others need as JSON. ``undo(made)``, if given,
    runs once when the whole run ends, in the process that ran it (xdist's controller, or
    pytest itself without workers), after every worker is done with it.

    One with an ``undo`` is created at the top level of this conftest (or a module it
    imports): the controller collects no test module, and ``undo`` must be known there."""

    def __init__(self, name: str, make: Callable[[Path], object],
                 undo: Callable[[object], None] | None = None):
        self.name, self.make, self.undo = name, make, undo
        _ONCE[name] = self

    def folder(self, run: Path) -> Path:
        return run / "once" / self.name

    def get(self, tmp_path_factory):
        folder = self.folder(run_folder(tmp_path_factory))
        folder.mkdir(parents=True, exist_ok=True)
        record = folder / "made.json"
        with FileLock(str(folder / "lock")):
            if not record.exists():
                try:
                    made = {"made": self.make(folder)}
                except BaseException as exc:   # pytest.skip too: every worker hears the same
                    made = {"failed": f"{type(exc).__name__}: {exc}",
                            "skipped": isinstance(exc, pytest.skip.Exception)}
                    _write_json(record, made)
                    raise
                _write_json(record, made)
                return made["made"]
        made = json.loads(record.read_text())
        if "failed" in made:
            (pytest.skip if made["skipped"] else pytest.fail)(
                f"{self.name}, made once for the run by another worker: {made['failed']}")
        return made["made"]

    def undo_at_end(self, run: Path) -> None:
        record = self.folder(run) / "made.json"
        if self.undo is None or not record.exists():
            return
        made = json.loads(record.read_text())
        if "made" in made:
            self.undo(made["made"])


def _write_json(path: Path, value) -> None:
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(value))
    partial.replace(path)


def _is_worker(config) -> bool:
    return hasattr(config, "workerinput")


def pytest_sessionfinish(session):
    if _is_worker(session.config):
        return
    _store_durations(session.config)
    factory = getattr(session.config, "_tmp_path_factory", None)  # as xdist itself reads it
    if factory is None:
        return
    run = factory.getbasetemp()
    for once in _ONCE.values():
        try:
            once.undo_at_end(run)
        except Exception as exc:     # the run's verdict stands; say what was left behind
            print(f"\nconftest: undoing {once.name} failed: {exc}", file=sys.stderr)


def _export_mlp(folder: Path) -> str:
    repository = folder / "repo"
    assert run_cli("export", ROOT / "examples" / "mlp.py:build", "--name", "mlp",
                   "--repository", repository) == 0
    return str(repository / "mlp")


EXPORTED_MLP = OncePerRun("exported_mlp", _export_mlp)


@pytest.fixture(scope="session")
def exported_mlp(tmp_path_factory) -> Callable[[Path], Path]:
    """Copies examples/mlp.py as `tritonkit export` writes it (verified; exported once per
    run) into a repository as ``mlp``; returns the model's folder."""
    made = Path(EXPORTED_MLP.get(tmp_path_factory))

    def copy(repository: Path) -> Path:
        return Path(shutil.copytree(made, Path(repository) / "mlp"))
    return copy


def _start_engine(folder: Path) -> dict:
    from tests.docker_engine import Engine

    engine = Engine(folder).start()
    if not engine.unavailable:
        engine.need_compose()
    if not engine.unavailable:
        try:
            engine.standin()
        except RuntimeError as exc:         # the image: no test can run without it
            engine.unavailable = str(exc)
    return engine.record()


def _close_engine(made: dict) -> None:
    from tests.docker_engine import Engine

    Engine.of_run(Path(made["folder"]), made["engine"]).close()


ENGINE = OncePerRun("docker_engine", lambda folder: {"folder": str(folder),
                                                     "engine": _start_engine(folder)},
                    lambda made: _close_engine(made))


@pytest.fixture(scope="session")
def engine(tmp_path_factory):
    """The real Docker engine and the stand-in Triton image (tests/docker_engine.py), one
    for the whole run: started and built by the first worker that asks, closed at the end."""
    from tests.docker_engine import Engine

    made = ENGINE.get(tmp_path_factory)
    engine = Engine.of_run(Path(made["folder"]), made["engine"])
    if engine.unavailable:
        pytest.skip(f"no Docker engine: {engine.unavailable}")
    return engine


# -- markers: the server marker checked, the quick tier, groups ------------------------------

# Fixtures that start the real tritonserver: a test that uses one is a `server` test.
SERVER_FIXTURES = frozenset({
    "deployed", "example_server", "served", "encoder_served", "stateful_served",
    "failing_server", "warm_server", "stateful_and_decoupled"})
# Module (or package) fixtures that cost seconds to make (a server, models exported): under
# xdist the tests that use one go to one worker (an xdist_group, with --dist loadgroup), which
# makes it once, not once per worker. A package-scoped one (tests/loadtest/conftest.py) is
# grouped by its package: its tests in several files still share one.
COSTLY_MODULE_FIXTURES = frozenset({
    "served", "encoder_served", "stateful_served", "failing_server", "warm_server",
    "stateful_and_decoupled", "exported"})
# Fixtures that take seconds without a server (torch exports): a test that uses one is slow.
SLOW_FIXTURES = frozenset({"exported", "exported_mlp"})
# Servers whose tests all warm models up until their latency is steady, which tests beside
# them on our 2 cores would keep it from becoming: a test that uses one is a timing test.
TIMING_FIXTURES = frozenset({"warm_server", "stateful_and_decoupled"})
# What the quick tier leaves out (`-m quick` selects the rest).
NOT_QUICK = ("server", "engine", "slow", "gpu")
# The xdist group of every `timing` and `alone` test: one worker runs them one after another
# from the run's start (a fixture they share with other tests is made again there), while
# the export tests run beside them on the CPU they leave idle (``_yields``).
ALONE_GROUP = "alone"


@pytest.hookimpl(tryfirst=True)         # before -m deselects by these markers, and xdist groups
def pytest_collection_modifyitems(config, items):
    for item in items:
        if (SERVER_FIXTURES.intersection(item.fixturenames)
                and not item.get_closest_marker("engine")):   # its `deployed` is in Docker
            item.add_marker(pytest.mark.server)
        if SLOW_FIXTURES.intersection(item.fixturenames):
            item.add_marker(pytest.mark.slow)
        if TIMING_FIXTURES.intersection(item.fixturenames):
            item.add_marker(pytest.mark.timing)
        if not any(item.get_closest_marker(name) for name in NOT_QUICK):
            item.add_marker(pytest.mark.quick)
        if _alone(item):                # before any other group: the closest marker wins
            item.add_marker(pytest.mark.xdist_group(ALONE_GROUP))
        if not item.get_closest_marker("xdist_group"):     # a module's own group comes first
            for fixture in sorted(COSTLY_MODULE_FIXTURES.intersection(item.fixturenames)):
                item.add_marker(pytest.mark.xdist_group(f"{_sharers(item, fixture)}.{fixture}"))
        if item.get_closest_marker("engine") and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group("engine"))    # one Docker engine, in order
        if item.get_closest_marker("timing") and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group("timing"))
    # In each module (or package sharing a server) the timing tests first, one after
    # another: their worker takes the machine once for the lot (_Machine), on a fresh server.
    order = {id(item): i for i, item in enumerate(items)}
    items.sort(key=lambda item: (_together(item), not _timing(item), order[id(item)]))
    _longest_first(config, items)


# -- the order the workers take tests in -------------------------------------------------

# Each test's seconds (set-up, call and tear-down) in the last run that stored them
# (`bash scripts/test.sh --store-durations`), in tests/durations.json under the run's root
# directory; a test not there is guessed by its markers.
GUESSED_S = (("slow", 30.0), ("engine", 30.0), ("server", 3.0), ("quick", 0.05))


def _durations_file(config) -> Path:
    return config.rootpath / "tests" / "durations.json"


def _recorded_durations(config) -> dict[str, float]:
    try:
        return json.loads(_durations_file(config).read_text())
    except (OSError, ValueError):
        return {}


def _seconds(item, recorded: dict[str, float]) -> float:
    if item.nodeid in recorded:
        return recorded[item.nodeid]
    return next((s for marker, s in GUESSED_S if item.get_closest_marker(marker)), 1.0)


def _unit(item) -> tuple[str, bool]:
    """What is ordered as one: a group (xdist hands it to one worker whole, --dist
    loadgroup), or a module's ungrouped tests (kept in a row, so that a worker that takes
    several of them sets the module's fixtures up once). True for a group."""
    group = item.get_closest_marker("xdist_group")
    if group:
        return group.kwargs.get("name", group.args[0] if group.args else "default"), True
    return item.module.__name__, False


def _longest_first(config, items) -> None:
    """The tests that take the machine alone first, while nothing else runs yet (none then
    waits for a long test to end); then the export tests, which run beside them; then the
    rest. Each tier longest first (a group by its tests' sum: one worker runs them; a
    module's tests by its longest: any worker takes one), so that the run does not end
    waiting on a long test started late. xdist keeps this order (scripts/test.sh passes
    --no-loadscope-reorder); a group's tests keep theirs."""
    recorded = _recorded_durations(config)
    seconds = {id(item): _seconds(item, recorded) for item in items}
    members: dict[tuple[str, bool], list] = {}
    for item in items:
        members.setdefault(_unit(item), []).append(item)

    def tier(tests) -> int:
        if any(_alone(test) for test in tests):
            return 0
        return 1 if all(_yields(test) for test in tests) else 2

    # A group goes to one worker whole: its tier is its tests'. Other tests have their own.
    group_tier = {unit: tier(tests) for unit, tests in members.items() if unit[1]}
    tiers = {id(item): group_tier[_unit(item)] if _unit(item)[1] else tier([item])
             for item in items}
    unit_s: dict[tuple[int, str, bool], float] = {}
    for item in items:
        unit = (tiers[id(item)], *_unit(item))
        unit_s[unit] = (unit_s.get(unit, 0.0) + seconds[id(item)] if unit[2]
                        else max(unit_s.get(unit, 0.0), seconds[id(item)]))
    order = {id(item): i for i, item in enumerate(items)}

    def key(item):
        unit = (tiers[id(item)], *_unit(item))
        within = (_hogs(item), order[id(item)]) if unit[2] else (False, -seconds[id(item)])
        return unit[0], -unit_s[unit], unit, within, order[id(item)]

    items.sort(key=key)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """--dist loadgroup, a worker given its next unit once it has one test left. xdist's own
    tops a worker up while it has three: a worker that finished short tests took the next
    long ones, which then ran one after another there (three full-size exports in a row:
    200 s) while other workers were done."""
    if config.getoption("dist", None) != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class OneAhead(LoadGroupScheduling):
        def _reschedule(self, node):
            if (not node.shutting_down and self.workqueue
                    and self._pending_of(self.assigned_work[node]) > 1):
                return
            super()._reschedule(node)

    return OneAhead(config, log)


def pytest_addoption(parser):
    parser.addoption("--store-durations", action="store_true",
                     help="write each test's seconds into tests/durations.json (the order "
                          "the next runs hand tests out in)")


_durations_seen: dict[str, float] = {}


def pytest_runtest_logreport(report):
    """Each test's seconds, as the run's controller hears them (a worker's too)."""
    nodeid = report.nodeid
    if nodeid.rfind("@") > nodeid.rfind("]"):           # xdist's "@group" suffix, as xdist
        nodeid = nodeid.rpartition("@")[0]              # reads it (an "@" in a parameter stays)
    _durations_seen[nodeid] = _durations_seen.get(nodeid, 0.0) + report.duration


def _store_durations(config) -> None:
    if not config.getoption("store_durations") or _is_worker(config) or not _durations_seen:
        return
    durations = _recorded_durations(config)
    durations.update({nodeid: round(s, 2) for nodeid, s in _durations_seen.items()})
    path = _durations_file(config)
    path.parent.mkdir(exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(dict(sorted(durations.items())), indent=0) + "\n")
    partial.replace(path)


def _sharers(item, fixture: str) -> str:
    """Who shares one instance of ``fixture`` with ``item``: its module, or for a
    package-scoped fixture the package that defines it."""
    defs = item._fixtureinfo.name2fixturedefs.get(fixture)    # none: a parameter of that name
    made_by = defs[-1] if defs else None                        # the one the test gets
    if made_by is not None and made_by.scope == "package":
        return made_by.func.__module__.rpartition(".")[0]      # tests.loadtest.conftest
    return item.module.__name__


def _together(item) -> str:
    """The tests kept together in the run's order: a module's, or a package's that share a
    package-scoped server."""
    for fixture in sorted(COSTLY_MODULE_FIXTURES.intersection(item.fixturenames)):
        sharers = _sharers(item, fixture)
        if sharers != item.module.__name__:
            return sharers
    return item.module.__name__


@pytest.hookimpl(trylast=True)          # after xdist named each item's group in its node id
def pytest_collection_finish(session):
    if session.config.getoption("loadgroup", False) and any(
            item.get_closest_marker("xdist_group") and "@" not in item.nodeid
            for item in session.items):
        raise pytest.UsageError("--dist loadgroup groups nothing with this pytest and "
                                "pytest-xdist (pytest-xdist#1386): use pytest<9.2")


@pytest.fixture(scope="session", autouse=True)
def _servers_started_are_counted(tmp_path_factory):
    """Every tritonserver started in this run (in-process or by a command a test runs) goes
    through a wrapper that counts it: a test that starts one without the `server` marker
    fails (see pytest_runtest_makereport), so that `-m quick` starts no server."""
    global _started_log
    from tritonkit.errors import TritonkitError
    from tritonkit.server.binary import BINARY_ENV, find_install

    try:
        install = find_install()
    except TritonkitError:
        yield                                  # no server to count: the server tests fail
        return
    guard = tmp_path_factory.mktemp("counted-tritonserver")
    home = guard / "pytriton" / "tritonserver"          # as find_install lays it out
    (home / "bin").mkdir(parents=True)
    for entry in install.home.iterdir():
        if entry.name != "bin":
            (home / entry.name).symlink_to(entry)
    for entry in install.binary.parent.iterdir():
        if entry.name != install.binary.name:
            (home / "bin" / entry.name).symlink_to(entry)
    (guard / "nvidia_pytriton.libs").symlink_to(install.libs)
    _started_log = guard / "started"
    wrapper = home / "bin" / install.binary.name
    wrapper.write_text(f'#!/bin/sh\necho "$$" >> "{_started_log}"\n'
                       f'exec "{install.binary}" "$@"\n')
    wrapper.chmod(0o755)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(BINARY_ENV, str(home))
        yield


_started_log: Path | None = None
_started_before: dict[str, int] = {}


def _servers_started() -> int:
    try:
        return len(_started_log.read_text().split()) if _started_log else 0
    except FileNotFoundError:
        return 0


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _started_before[item.nodeid] = _servers_started()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if call.when == "teardown" and not item.get_closest_marker("server"):
        before = _started_before.pop(item.nodeid, None)
        if before is not None and _servers_started() > before:
            report.outcome = "failed"
            report.longrepr = (f"{item.nodeid} started a tritonserver without the `server` "
                               "marker: mark it @pytest.mark.server (a fixture that starts one "
                               "goes into SERVER_FIXTURES in tests/conftest.py), so that the "
                               "quick tier (-m quick) leaves it out")
    return report


# -- each test from a roomy frame --------------------------------------------------------

# A hot loop at the edge of one of CPython's 16 KB frame chunks maps and unmaps a chunk per
# call (tritonkit.frames), and an xdist worker runs tests deep enough to meet such edges.
# Each test's set-up, call and tear-down run from a roomy frame, whatever the depth.
@pytest.hookimpl(tryfirst=True, specname="pytest_runtest_protocol")  # the plain name: the machine's
def pytest_runtest_protocol_from_a_roomy_frame(item, nextitem):
    """pytest's own protocol (set-up, call, tear-down, reports) for ``item``, run from a
    roomy frame; the wrappers of this module and the plugins still wrap it."""
    from _pytest.runner import runtestprotocol

    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    from_a_roomy_frame(lambda: runtestprotocol(item, nextitem=nextitem))
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


# -- garbage collection ------------------------------------------------------------------

# A worker holds torch, ONNX, onnxscript and transformers (some 650,000 objects that live as
# long as it does), and each of Python's full collections walked them all: 3.0 of the 46 CPU s
# of tests/test_export.py run alone. After a test that imported modules (the first test
# after collection, the first export, a model family's first build), the worker collects
# once and freezes what survives (gc.freeze): later collections walk only what the tests
# made since. Garbage is collected before it could be frozen.
FREEZE_AFTER_MODULES = 20
_modules_frozen = 0


@pytest.hookimpl(trylast=True)                 # after the test's fixtures are torn down
def pytest_runtest_teardown(item, nextitem):
    global _modules_frozen
    if len(sys.modules) >= _modules_frozen + FREEZE_AFTER_MODULES:
        gc.collect()
        gc.freeze()
        _modules_frozen = len(sys.modules)


# -- timing tests have the machine to themselves -------------------------------------------

class _Machine:
    """Who runs now, between the workers of one run: flock(2) on ``run``, shared by every
    test, exclusive for a `timing` test (a latency or a clock it measures, which tests
    beside it on our 2 cores would disturb). ``door`` is held while asking, so that tests
    starting after a timing test began to wait do not keep it waiting."""

    def __init__(self, folder: Path, alone_in_run: bool):
        self.door = open(folder / "machine.door", "a+")
        self.run = open(folder / "machine.run", "a+")
        # Beside tests hold ``beside`` shared; a hog's call holds it alone (``beside_door``
        # as ``door``: beside tests that start one after another do not keep it waiting).
        self.beside_door = open(folder / "machine.beside-door", "a+")
        self.beside = open(folder / "machine.beside", "a+")
        self.alone_done = folder / "machine.alone-done"
        self.alone_in_run = alone_in_run
        self.alone = False
        self.held = False

    def alone_ahead(self) -> bool:
        """Whether the run's `alone` tests are still to come or running (their worker says
        when its last one ended; a run with none has none ahead)."""
        return self.alone_in_run and not self.alone_done.exists()

    def enter(self, alone: bool) -> None:
        if self.held and self.alone == alone:
            return
        self.leave()
        _take(self.door, self.run, alone)
        self.alone, self.held = alone, True

    @contextlib.contextmanager
    def side(self, alone: bool):
        """Held by a beside test (``alone`` False) for its whole run, and by a hog's call."""
        _take(self.beside_door, self.beside, alone)
        try:
            yield
        finally:
            _give(self.beside_door, self.beside, alone)

    def leave(self) -> None:
        if self.held:
            _give(self.door, self.run, self.alone)
        self.held = False


def _take(door, lock, alone: bool) -> None:
    """``lock`` exclusive (``alone``) or shared, asked for through ``door``: one waiting for
    it alone holds the door, so that those asking to share it after it do not keep it
    waiting; a sharer lets the door go once it has the lock."""
    fcntl.flock(door, fcntl.LOCK_EX)
    fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
    if not alone:
        fcntl.flock(door, fcntl.LOCK_UN)


def _give(door, lock, alone: bool) -> None:
    fcntl.flock(lock, fcntl.LOCK_UN)
    if alone:
        fcntl.flock(door, fcntl.LOCK_UN)


_machine: _Machine | None = None


def _timing(item) -> bool:
    return item is not None and item.get_closest_marker("timing") is not None


def _alone(item) -> bool:
    """A timing test, or one whose load beside other tests' would double its work (a
    repository of full-size models warmed until steady: 120 CPU s alone, 240 beside)."""
    return _timing(item) or (item is not None and item.get_closest_marker("alone") is not None)


def _hogs(item) -> bool:
    """An `alone` test that is no timing test: it takes both cores (why it is alone), so it
    comes last among them (the timing tests before it leave cores idle for exports beside),
    and the tests beside them wait while its call runs: beside them its warm-up until steady
    needed more requests (the full-size repository's test took 130 s, where alone it takes 83)."""
    return _alone(item) and not _timing(item)


def _alone_from_setup(item) -> bool:
    """An `alone` test whose set-up measures too (a server warmed until steady): it takes
    the machine from its set-up on. Any other takes it for its call only: what it prepares
    (exports, a server started) runs beside other tests."""
    return _alone(item) and bool(TIMING_FIXTURES.intersection(item.fixturenames))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Under xdist, a `timing` or `alone` test waits until no other test runs, and none
    starts until it is done (from its call on, or from its set-up: ``_alone_from_setup``);
    the next one on its worker (they are grouped) keeps the machine. An export test that
    starts while `alone` tests are ahead runs beside them, on the CPU they leave idle
    (``_beside``); once they are done it runs as any other test (at idle priority beside
    busy workers it was starved: one took 76 s for 4 CPU s at the run's end)."""
    global _machine
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return (yield)
    if _machine is None:
        _machine = _Machine(run_folder(item.config._tmp_path_factory),  # as xdist reads it
                            alone_in_run=any(map(_alone, item.session.items)))  # each worker has all
    beside = _beside(item) and _machine.alone_ahead()
    if beside:
        _machine.leave()
    elif not (_machine.held and _machine.alone and _alone(item)):
        _machine.enter(alone=_alone_from_setup(item))
    try:
        if not beside:
            return (yield)
        with _machine.side(alone=False), _idle_priority():
            return (yield)
    finally:
        if not (_alone(item) and _alone(nextitem)):
            _machine.leave()
        if _alone(item) and not _alone(nextitem):      # the alone group is one worker's, in a row
            _machine.alone_done.touch()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    if _machine is not None and _alone(item):
        _machine.enter(alone=True)
    if _machine is None or not _hogs(item):
        return (yield)
    with _machine.side(alone=True):
        return (yield)


# -- export tests run beside the others, on the CPU they leave idle ----------------------

# Modules whose tests export with torch and check with ONNX Runtime, timing nothing.
EXPORT_MODULES = frozenset({
    "test_export", "test_export_hf", "test_export_kwargs", "test_export_errors",
    "test_export_threads", "test_verify", "test_verification_budget",
    "test_verification_coverage", "test_export_in_one_process"})
# Modules whose tests without a server cost CPU and wait on no clock that a minute held back
# would break (a bound of seconds on a command, a peer that trickles): they run beside the
# alone tests as the export tests do, instead of after them.
BESIDE_MODULES = EXPORT_MODULES | {
    "test_cli", "test_k8s", "test_model_config", "test_doctor", "test_diagnose", "test_docs",
    "test_output_at_a_glance", "test_tune_compare", "test_user_code_boundary", "test_packaging",
    "test_onnxruntime_telemetry", "test_hostile_export_report", "tests.loadtest.test_report",
    "test_messages", "test_nvml", "test_alerts", "test_tune_search", "test_export_tensorrt",
    "test_hostile_table_text", "test_server_settings_conflicts", "test_hostile_outputs",
    "test_hostile_compose_values", "test_cpu_profile", "test_mirror_symlinks",
    "test_deploy_many_models", "test_export_checker", "test_length_rules",
    "test_hostile_export_signals"}


def _yields(item) -> bool:
    """A test of BESIDE_MODULES without a server: it would take CPU and it times nothing,
    while a server test beside it warms up until its latency is steady (498 requests did not
    get there once, in a CI run) and a timing test measures."""
    name = item.module.__name__
    return ((name in BESIDE_MODULES or name.rpartition(".")[2] in BESIDE_MODULES)
            and not any(item.get_closest_marker(m) for m in ("server", "engine", "timing", "alone")))


def _beside(item) -> bool:
    """A `_yields` test where its worker can take its priority back after it
    (``_idle_priority``); elsewhere it takes its turn as any other test."""
    return _yields(item) and _may_raise_priority()


def _set_policy(policy: int) -> None:
    """Every thread of this process (a policy is per thread), and those they start."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setscheduler(int(tid), policy, os.sched_param(0))
        except (ProcessLookupError, PermissionError):
            pass


def _may_raise_priority() -> bool:
    """Whether a worker can get its priority back after lowering it (root, or RLIMIT_NICE)."""
    return os.geteuid() == 0 or resource.getrlimit(resource.RLIMIT_NICE)[0] >= 20


@contextlib.contextmanager
def _idle_priority():
    """SCHED_IDLE for the set-up, call and tear-down: the test's threads and commands run
    only on a core no other thread wants, and one that wakes takes the core at once (a
    nice value only shortens their turns: a timing test's request could wait on one)."""
    before = os.sched_getscheduler(0)
    _set_policy(os.SCHED_IDLE)
    try:
        yield
    finally:
        _set_policy(before)


# -- workers and commands see the run's environment --------------------------------------

# readline, which pytest's debugger imports, writes COLUMNS and LINES (80x24 off a terminal)
# into the process's C environment, not os.environ: xdist's workers and every command a
# test started inherited them, and laid tables out 80 columns wide where the run's own
# are 160 (tritonkit.cli.options). Before any worker starts, the C environment is set
# back to what the run was started with.
_TERMINAL_SIZE = ("COLUMNS", "LINES")


def pytest_configure(config):
    for name in _TERMINAL_SIZE:
        if name not in os.environ:
            os.unsetenv(name)
