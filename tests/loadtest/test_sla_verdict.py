"""`tritonkit loadtest` SLA verdict: pass, SLA miss, run errors and error budgets, and the
exit code each gives."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import run_cli
from tests.loadtest.conftest import _loadtest, _result
from tritonkit import report
from tritonkit.errors import EXIT_RUN_ERRORS, EXIT_SLA_MISS, EXIT_USAGE, UsageError


def test_an_sla_that_holds_exits_zero():
    verdict = report.judge(_result(p99=5.0, qps=100.0), report.Sla(p99_ms=10, min_qps=50))
    assert verdict.outcome == report.PASS and verdict.exit_code == 0
    assert [c.passed for c in verdict.checks] == [True, True]


def test_a_p99_over_the_limit_is_an_sla_miss_with_its_own_exit_code():
    verdict = report.judge(_result(p99=25.0), report.Sla(p99_ms=10))
    assert verdict.exit_code == EXIT_SLA_MISS
    assert verdict.reasons == ("concurrency 4: p99 25.00 ms > 10.00 ms",)


def test_too_few_queries_per_second_is_an_sla_miss():
    assert report.judge(_result(qps=40.0), report.Sla(min_qps=50)).exit_code == EXIT_SLA_MISS


def test_failed_requests_without_an_error_budget_are_run_errors_not_a_pass():
    verdict = report.judge(_result(errors={"HTTP 500: boom": 3}), report.Sla(p99_ms=10))
    assert verdict.exit_code == EXIT_RUN_ERRORS
    assert "3 of 1000 requests failed (most: 3x HTTP 500: boom)" in verdict.reasons[0]


def test_failed_requests_within_the_error_budget_pass_and_beyond_it_are_run_errors():
    result = _result(errors={"timeout": 5})                     # 0.5 % of 1000
    assert report.judge(result, report.Sla(max_error_rate=0.01)).exit_code == 0
    beyond = report.judge(result, report.Sla(p99_ms=10, max_error_rate=0.001))
    assert beyond.exit_code == EXIT_RUN_ERRORS                  # exit 4, as with no budget: not a miss
    assert beyond.reasons == ("concurrency 4: 5 of 1000 requests failed (most: 5x timeout), "
                              "more than the 0.1000% allowed",)
    assert [c.describe() for c in beyond.checks if not c.passed] == [
        "concurrency 4: error rate 0.5000% > 0.1000%: more requests failed than the budget allows "
        "(a run error, exit 4)"]


def test_an_error_budget_of_zero_is_the_same_as_none():
    result = _result(errors={"timeout": 1})
    assert (report.judge(result, report.Sla(max_error_rate=0)).exit_code
            == report.judge(result, report.Sla()).exit_code == EXIT_RUN_ERRORS)
    assert report.judge(_result(), report.Sla(max_error_rate=0)).exit_code == 0


def test_a_run_cut_short_by_the_server_is_a_run_error_whatever_the_latency():
    verdict = report.judge(_result(ended_early="the server stopped answering 2.0 s into it"),
                           report.Sla(p99_ms=1000))
    assert verdict.exit_code == EXIT_RUN_ERRORS and "stopped answering" in verdict.reasons[0]


def test_a_level_that_measured_nothing_is_not_a_pass():
    verdict = report.judge(_result(sent=0), report.Sla(max_error_rate=0.5))
    assert verdict.exit_code == EXIT_RUN_ERRORS and "no request was sent" in verdict.reasons[0]


def test_an_error_rate_is_a_fraction():
    with pytest.raises(UsageError, match="fraction"):
        report.Sla(max_error_rate=5)


@pytest.mark.parametrize("flag, value", [("--sla-p99-ms", "nan"), ("--sla-p99-ms", "inf"),
                                         ("--sla-min-qps", "nan"), ("--sla-min-qps", "inf")])
def test_an_sla_limit_that_is_not_a_finite_number_is_refused(flag, value, capsys):
    # nan passes every comparison as false and inf can never be met: neither is a limit
    assert run_cli("loadtest", "--model", "m", "--rate", "5", flag, value) == EXIT_USAGE
    assert f"error: {flag} takes a finite number" in capsys.readouterr().err


@pytest.mark.server
def test_an_sla_that_cannot_be_met_exits_with_the_sla_code(served, tmp_path):
    code = _loadtest(served, "--concurrency", "2", "--duration", "1", "--sla-p99-ms", "0.001",
                     "--json", tmp_path / "miss.json")
    assert code == EXIT_SLA_MISS
    verdict = json.loads((tmp_path / "miss.json").read_text())["verdict"]
    assert verdict["outcome"] == "sla-miss" and "p99" in verdict["reasons"][0]


@pytest.mark.parametrize("args, says", [
    (["--sla-p99-ms", "0"], "hint: e.g. --sla-p99-ms 20"),
    (["--sla-min-qps", "-1"], "hint: e.g. --sla-min-qps 500; leave it out for no minimum"),
])
def test_an_sla_limit_out_of_range_is_refused_with_a_hint(capsys, args, says):
    assert run_cli("loadtest", "--model", "m", "--rate", "5", *args) == EXIT_USAGE
    assert capsys.readouterr().err.splitlines()[1] == says


def test_sla_min_qps_says_it_counts_requests_not_inferences(capsys):
    assert run_cli("loadtest", "--help") == 0
    text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", capsys.readouterr().out).split())
    assert "successful requests per second" in text and "a request of --batch-size B carries B" in text


def test_an_sla_line_says_both_numbers_in_one_format():
    verdict = report.judge(_result(p99=25.0, qps=1405.0), report.Sla(p99_ms=10, min_qps=100_000))
    assert [c.describe() for c in verdict.checks] == [
        "concurrency 4: p99 25.00 ms > 10.00 ms",
        "concurrency 4: 1,405.0 QPS < 100,000.0 QPS"]
