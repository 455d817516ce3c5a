"""`tritonkit monitor` of a server whose latency counters are off: requests and times read
from its summaries, and said once."""

from __future__ import annotations

import pytest

from tests.conftest import run_cli
from tests.monitor.conftest import _fake_pynvml, _scraping
from tritonkit.monitor.triton_metrics import parse_metrics, rates


def _summaries_only(requests: int, request_us: int, queue_us: int, input_us: int, infer_us: int,
                    output_us: int, p50_us: int) -> str:
    """tritonserver 2.51.0 started with --metrics-config counter_latencies=false
    --metrics-config summary_latencies=true, as it served its metrics here (quantiles but
    one left out): its counters stay at 0 however many requests it serves (#8125)."""
    text = """\
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="example",version="1"} 0
# TYPE nv_inference_request_failure counter
nv_inference_request_failure{model="example",reason="OTHER",version="1"} 0
nv_inference_request_failure{model="example",reason="BACKEND",version="1"} 0
# TYPE nv_inference_count counter
nv_inference_count{model="example",version="1"} 0
# TYPE nv_inference_exec_count counter
nv_inference_exec_count{model="example",version="1"} 0
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="example",version="1"} 0
"""
    for family, total in (("request", request_us), ("queue", queue_us), ("compute_input", input_us),
                          ("compute_infer", infer_us), ("compute_output", output_us)):
        name = f"nv_inference_{family}_summary_us"
        text += (f"# TYPE {name} summary\n"
                 f'{name}_count{{model="example",version="1"}} {requests}\n'
                 f'{name}_sum{{model="example",version="1"}} {total}\n')
        if family == "request":
            text += f'{name}{{model="example",version="1",quantile="0.5"}} {p50_us}\n'
    return text


# Two scrapes of one such server: after 3 requests of batch 2, then 5 more of batch 4.
SUMMARIES_BEFORE = _summaries_only(3, 156543, 198, 411, 154018, 1893, p50_us=950)


SUMMARIES_AFTER = _summaries_only(8, 165676, 1067, 538, 159825, 4200, p50_us=1208)


def test_with_triton_latency_counters_off_requests_and_times_come_from_its_summaries():
    before, after = parse_metrics(SUMMARIES_BEFORE), parse_metrics(SUMMARIES_AFTER)
    r = rates(before.models["example"], after.models["example"], seconds=1.0)
    assert r.requests_per_s == 5                      # 8 - 3 served, not the counters' 0
    assert r.queue_us == pytest.approx((1067 - 198) / 5)
    assert r.compute_us == pytest.approx(((538 - 411) + (159825 - 154018) + (4200 - 1893)) / 5)
    # what Triton did not count is unknown, not 0 (no batch of 0, no idle server)
    assert r.avg_batch is None and r.inferences_per_s is None and r.pending is None
    assert any("counter_latencies=false" in note for note in after.notes)


def test_a_summaries_only_server_counts_the_requests_of_its_first_busy_interval():
    # idle, its counters' zeros are true; then busy, and they stay at 0
    idle = parse_metrics(_summaries_only(0, 0, 0, 0, 0, 0, p50_us=0))
    busy = parse_metrics(SUMMARIES_AFTER)
    r = rates(idle.models["example"], busy.models["example"], seconds=2.0)
    assert r.requests_per_s == 8 / 2.0 and r.avg_batch is None
    assert r.queue_us == pytest.approx(1067 / 8)


def test_a_summaries_only_server_whose_counters_count_keeps_its_batch_sizes_mid_request():
    """A Triton that counts with its latency counters off, scraped between a request's
    summary observation and its success count (one family is read after the other): one
    request ahead in the summary is a scrape's timing, not counters stuck at 0."""
    counting = (SUMMARIES_AFTER
                .replace('request_success{model="example",version="1"} 0',
                         'request_success{model="example",version="1"} 7')
                .replace('nv_inference_count{model="example",version="1"} 0',
                         'nv_inference_count{model="example",version="1"} 28')
                .replace('exec_count{model="example",version="1"} 0',
                         'exec_count{model="example",version="1"} 7'))
    example = parse_metrics(counting).models["example"]
    assert (example.inference_count, example.exec_count) == (28, 7)
    assert example.request_success == 8                  # the summary's count: the later one


def test_a_summaries_only_model_with_the_response_cache_counts_requests_by_its_queue_summary():
    """Triton leaves the request summary out for a model with the response cache (core
    src/metric_model_reporter.cc InitializeSummaries); its queue summary still counts
    every request. Read as "no summaries", the model served nothing and took no time."""
    cached = "".join(line + "\n" for line in SUMMARIES_AFTER.splitlines()
                     if "nv_inference_request_summary_us" not in line)
    example = parse_metrics(cached).models["example"]
    assert example.request_success == 8 and example.request_duration_us is None
    assert example.queue_duration_us == 1067
    assert not any("so are its summaries" in n for n in parse_metrics(cached).notes)


def _on_gpu(text: str, uuid: str, model: str = "example") -> str:
    """A recorded exposition's series moved onto GPU ``uuid`` (and renamed ``model``)."""
    return text.replace('model="example"', f'gpu_uuid="{uuid}",model="{model}"')


def test_a_summaries_only_model_busy_on_one_gpu_and_idle_on_another_gets_one_note():
    """Its idle GPU's series reads 0 in counters and summaries alike, which alone would be
    a Triton that counts: two notes for one model, one saying its batch sizes are known."""
    idle = _summaries_only(0, 0, 0, 0, 0, 0, p50_us=0)
    metrics = parse_metrics(_on_gpu(SUMMARIES_AFTER, "GPU-aaa") + _on_gpu(idle, "GPU-bbb"))
    (note,) = metrics.notes
    assert "batch sizes, failures and pending requests of example are unknown" in note
    assert metrics.gpu_totals()["GPU-bbb"].inference_count is None
    assert metrics.models["example"].request_success == 8


def test_a_summaries_only_servers_note_names_the_models_whose_counters_count_nothing():
    idle = _summaries_only(0, 0, 0, 0, 0, 0, p50_us=0)
    metrics = parse_metrics(_on_gpu(SUMMARIES_AFTER, "GPU-aaa", model="resnet")
                            + _on_gpu(idle, "GPU-aaa", model="bert"))
    (note,) = metrics.notes
    assert "of resnet are unknown" in note and "bert" not in note
    assert metrics.models["bert"].inference_count == 0    # its 0 is not 2.51's bug yet


def test_a_summaries_only_server_is_watched_as_serving_and_said_once(monkeypatch, capsys):
    _scraping(monkeypatch, SUMMARIES_BEFORE, SUMMARIES_AFTER, SUMMARIES_AFTER)
    monkeypatch.setattr("tritonkit.monitor.nvml._load_pynvml", lambda: _fake_pynvml())
    # a slot a slow sample ran past is skipped: 0.25 s apart for 1.5 s, a busy host still
    # takes two
    assert run_cli("monitor", "--url", "127.0.0.1:8000", "--interval", "0.25",
                   "--duration", "1.5") == 0
    out = capsys.readouterr()
    assert out.err.count("counter_latencies=false") == 1          # one warning, not per sample
    example = [line.split() for line in out.out.splitlines() if line.split()[:1] == ["example"]]
    assert example[1][1] == "8" and example[1][2] == "—"          # requests, inferences unknown
