"""`tritonkit loadtest` with perf_analyzer: its failures and unstable windows read for what
they are."""

from __future__ import annotations

import pytest


def _stand_in_perf_analyzer(tmp_path, monkeypatch, says: str, code: int):
    """A stand-in for the perf_analyzer binary (the real one cannot be made to fail on
    demand): it writes one row of figures, prints ``says`` on stderr and exits ``code``."""
    from bench import perf_analyzer

    columns = ("Concurrency,Inferences/Second,Client Send,Client Recv,p50 latency,p90 latency,"
               "p95 latency,p99 latency")
    tool = tmp_path / "perf_analyzer"
    tool.write_text("#!/bin/sh\nwhile [ \"$1\" != -f ]; do shift; done\n"
                    f"printf '{columns}\\n1,2000,10,20,400,450,480,900\\n' > \"$2\"\n"
                    f"echo '{says}' >&2\nexit {code}\n")
    tool.chmod(0o755)
    monkeypatch.setattr(perf_analyzer, "perf_analyzer_binary", lambda: tool)
    monkeypatch.setattr(perf_analyzer, "_library_dir", lambda: tmp_path)
    return perf_analyzer


def test_perf_analyzer_that_exits_non_zero_after_writing_figures_gives_a_result_marked_unstable(
        tmp_path, monkeypatch):
    """perf_analyzer's exit status is kept with the figures it wrote: the benchmarks mark
    such rounds, never take them for a stable measurement."""
    import warnings

    perf_analyzer = _stand_in_perf_analyzer(tmp_path, monkeypatch, code=2, says=(
        "Failed to obtain stable measurement within 10 measurement windows for concurrency 1."))
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        result = perf_analyzer.run_perf_analyzer("127.0.0.1:1", "m", 1)
    assert result.throughput == 2000.0 and result.returncode == 2 and not result.stable
    assert result.failure == "no stable window"
    assert not [w for w in warned if issubclass(w.category, ResourceWarning)]   # its CSV was closed


def test_perf_analyzer_that_fails_for_another_reason_says_what_it_printed_last(tmp_path, monkeypatch):
    perf_analyzer = _stand_in_perf_analyzer(tmp_path, monkeypatch, code=99,
                                            says="error: failed to get model metadata: m")
    result = perf_analyzer.run_perf_analyzer("127.0.0.1:1", "m", 1)
    assert not result.stable
    assert result.failure == "exit 99: error: failed to get model metadata: m"


def test_perf_analyzer_that_found_no_stable_window_and_wrote_nothing_is_asked_again_with_longer_windows(
        tmp_path, monkeypatch):
    """perf_analyzer that finds no stable window sometimes writes no figures at all (a
    6-minute benchmark then died at its last level): it is run once more with windows twice
    as long, its own advice; a second run that writes nothing still fails, saying both."""
    from bench import perf_analyzer

    columns = "Concurrency,Inferences/Second,p50 latency,p90 latency,p95 latency,p99 latency"
    tool = tmp_path / "perf_analyzer"
    tool.write_text(
        "#!/bin/sh\necho \"$@\" >> \"$(dirname \"$0\")/calls\"\n"
        "interval=; out=\n"
        "while [ $# -gt 0 ]; do case \"$1\" in -p) interval=$2;; -f) out=$2;; esac; shift; done\n"
        "if [ \"$interval\" -ge 6000 ] && [ ! -e \"$(dirname \"$0\")/never\" ]; then\n"
        f"  printf '{columns}\\n1,2000,400,450,480,900\\n' > \"$out\"; exit 0; fi\n"
        "echo 'Failed to obtain stable measurement within 10 measurement windows for concurrency 1.'\n"
        "exit 2\n")
    tool.chmod(0o755)
    monkeypatch.setattr(perf_analyzer, "perf_analyzer_binary", lambda: tool)
    monkeypatch.setattr(perf_analyzer, "_library_dir", lambda: tmp_path)

    result = perf_analyzer.run_perf_analyzer("127.0.0.1:1", "m", 1, interval_ms=3000)
    assert result.stable and result.throughput == 2000.0
    calls = (tmp_path / "calls").read_text().splitlines()
    assert len(calls) == 2 and "-p 3000" in calls[0] and "-p 6000" in calls[1]

    (tmp_path / "never").touch()
    with pytest.raises(RuntimeError, match="stable measurement.*also with 6000 ms windows"):
        perf_analyzer.run_perf_analyzer("127.0.0.1:1", "m", 1, interval_ms=3000)


def test_a_perf_analyzer_library_link_left_dangling_is_pointed_anew(tmp_path, monkeypatch):
    import tempfile

    from bench import perf_analyzer

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    links = tmp_path / "tritonkit-perf-analyzer-libs"
    links.mkdir()
    (links / "libb64.so.0d").symlink_to(tmp_path / "an-older-wheel" / "libb64-0123.so.0d")
    assert perf_analyzer._library_dir() == links
    for name in ("libb64.so.0d", "libcudart.so.12"):
        assert (links / name).exists(), f"{name} still dangles"


def test_perf_analyzer_still_running_at_its_bound_is_stopped_and_says_its_last_lines(tmp_path, monkeypatch):
    """A perf_analyzer that never ends (one in a benchmark waited 600 s at concurrency 32) is
    stopped at ``timeout_s``: the caller gets an error with the last lines it printed, and no
    process is left behind."""
    import os
    import time

    from bench import perf_analyzer

    tool = tmp_path / "perf_analyzer"
    tool.write_text("#!/bin/sh\necho $$ > \"$(dirname \"$0\")/pid\"\n"
                    "echo '  Pass [1] throughput: 10 infer/sec.'\nexec sleep 60\n")
    tool.chmod(0o755)
    monkeypatch.setattr(perf_analyzer, "perf_analyzer_binary", lambda: tool)
    monkeypatch.setattr(perf_analyzer, "_library_dir", lambda: tmp_path)

    began = time.monotonic()
    with pytest.raises(RuntimeError, match=r"still running after 1 s at concurrency 32; "
                                           r"its last lines: Pass \[1\] throughput"):
        perf_analyzer.run_perf_analyzer("127.0.0.1:1", "m", 32, timeout_s=1)
    assert time.monotonic() - began < 30
    pid = int((tmp_path / "pid").read_text())
    with pytest.raises(ProcessLookupError):      # killed and reaped
        os.kill(pid, 0)
