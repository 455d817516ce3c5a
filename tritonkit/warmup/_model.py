"""Warming one model: every shape's cold first request, a burst for its instances, then
each shape until steady; and what a fresh client's first request costs after it."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace

import numpy as np

from tritonkit.client import Endpoint
from tritonkit.errors import UsageError
from tritonkit.server.local import Deadline, Progress
from tritonkit.warmup._config import (
    describe_shape,
    guessed_shapes,
    model_instances,
    not_warmable,
    sequence_slots,
    warmup_shapes,
)
from tritonkit.warmup._errors import InputRefused
from tritonkit.warmup._requests import Driver
from tritonkit.warmup._results import DEFAULT_REQUESTS, ColdStart, ModelWarmup, SteadyRule
from tritonkit.warmup._server import http_client, ready_versions, server_config

CHECK_REQUESTS = 20                 # requests after a fresh client's first, for its p50
CHECK_CLIENTS = 3                   # fresh clients whose first requests make the "after" figure
MAX_SEQUENCES_AT_ONCE = 64          # a stateful model's burst: every sequence slot, up to this


def warm_model(endpoint: Endpoint, name: str, load_s: float | None, *, requests: int,
               deadline: Deadline, rule: SteadyRule, check: bool, cold: bool,
               progress: Progress) -> ModelWarmup:
    """Every shape's first request (the cold ones) before any shape's budget is spent, then
    each shape until steady on its share of what is left of ``requests``. A model serving
    several versions (its version_policy) has each version's shapes warmed: each version
    is a model of its own, with its own cold start. A sample is one request, or a stateful
    model's whole sequence: its series holds the sequence's mean request, its first figure
    the first request alone (``Driver``)."""
    client = http_client(endpoint, deadline)
    try:
        config = server_config(client, name)
        versions = ready_versions(client, name)
    finally:
        client.close()
    if why := not_warmable(config, grpc=bool(endpoint.grpc_url)):
        return ModelWarmup(model=name, steady=False, requests=0, load_s=load_s, cold=cold,
                           warmed=False, note=why)
    driver = Driver.for_model(endpoint, name, config, deadline)
    warming = _Warming(name, driver, _targets(driver, config, versions), progress)
    # A steady window spans every instance.
    rule = replace(rule, window=max(rule.window, model_instances(config)))
    taken, notes = _first_requests(warming, _burst_size(config), guessed_shapes(config), deadline)
    enough = _enough_requests(warming, taken, rule, requests)
    unsteady = _until_steady(warming, taken, rule, requests, deadline, enough)
    if unsteady:
        notes.append(unsteady)
    steady = bool(taken) and all(rule.is_steady(t.series) for t in taken)
    if not taken and not notes:
        notes.append("not reached: out of time")
    lead = taken[0] if taken else None
    # A p50 only from a steady series: one still holding its cold request would read the
    # cold start as the norm (first / p50 = 1.0 on a model that was cold).
    p50 = (statistics.median(lead.series[-rule.window:])
           if lead and rule.is_steady(lead.series) else None)
    # A streamed model's first responses, over the same samples.
    first_responses = lead.first_responses if lead else []
    first_response_p50 = (statistics.median(first_responses[-rule.window:])
                          if p50 is not None and first_responses else None)
    after = None
    if check and steady:
        progress(f"measuring {name}: a fresh client's first request")
        after = _cold_start_figures(driver, lead.inputs)
    return ModelWarmup(model=name, steady=steady, requests=warming.sent, load_s=load_s,
                       first_ms=lead.first_ms if lead else None, steady_p50_ms=p50, after=after,
                       shapes=[t.label for t in warming.targets],
                       note="; ".join(filter(None, [driver.describe(), *notes])), cold=cold,
                       series_ms={t.label: [round(v, 3) for v in t.series] for t in taken},
                       first_response_ms=first_responses[0] if first_responses else None,
                       first_response_p50_ms=first_response_p50,
                       suggested_requests=enough if unsteady and not deadline.expired() else None,
                       steady_window=rule.window)


@dataclass(eq=False)
class _Target:
    """One shape of one version of the model, and what its samples measured (ms)."""

    label: str
    version: str                # "": the one version the server picks
    inputs: list
    first_ms: float | None = None                       # its first request alone
    series: list[float] = field(default_factory=list)   # one figure per sample, in order
    # A streamed model: each sample's first request's time to its first response.
    first_responses: list[float] = field(default_factory=list)


def _targets(driver: Driver, config: dict, versions: list[str]) -> list[_Target]:
    """Every shape of every version the server serves, smallest shape first; a version
    is named only when there are several."""
    shapes = warmup_shapes(config)
    rng = np.random.default_rng(0)
    try:
        prepared = [driver.inputs(shape, rng) for shape in shapes]
    except UsageError as exc:               # an input its config makes too large to send
        raise UsageError(f"'{driver.name}': {exc.message}", hint=exc.hint) from None
    return [_Target(f"v{version} {describe_shape(shape)}" if version else describe_shape(shape),
                    version, inputs)
            for version in (versions if len(versions) > 1 else [""])
            for shape, inputs in zip(shapes, prepared)]


def _burst_size(config: dict) -> int:
    """Samples a burst sends at once: one per instance, or for a stateful model one per
    sequence slot of each (up to MAX_SEQUENCES_AT_ONCE)."""
    instances = model_instances(config)
    if "sequence_batching" in config:
        return min(instances * sequence_slots(config), MAX_SEQUENCES_AT_ONCE)
    return instances


class _Warming:
    """One model's warm-up under way: its targets, and the requests sent so far."""

    def __init__(self, name: str, driver: Driver, targets: list[_Target],
                 progress: Progress) -> None:
        self.name, self.driver, self.targets, self.progress = name, driver, targets, progress
        self.sent = 0

    def sample(self, connection, target: _Target) -> None:
        """One sample of ``target`` on ``connection``, its figures kept."""
        self.progress(f"warming {self.name}: shape {self.targets.index(target) + 1}/"
                      f"{len(self.targets)} ({target.label}), {self.sent} requests sent")
        sample = self.driver.sample(connection, target.inputs, target.version)
        if target.first_ms is None:
            target.first_ms = sample.latencies[0]
        target.series.append(sample.mean_ms)
        if sample.first_response_ms is not None:
            target.first_responses.append(sample.first_response_ms)
        self.sent += len(sample.latencies)


def _first_requests(warming: _Warming, burst: int, guessed: bool,
                    deadline: Deadline) -> tuple[list[_Target], list[str]]:
    """Each target's first (cold) sample, then a burst of ``burst`` at once; the targets
    the model took, and a note for each guessed shape it refused (skipped, unless it
    refused them all: then its own config describes what it refuses)."""
    driver, targets = warming.driver, warming.targets
    taken: list[_Target] = []
    notes: list[str] = []
    for target in targets:
        if deadline.expired():
            break
        connection = driver.connect()     # each call bounded by the time left now
        try:
            warming.sample(connection, target)
            if burst > 1:
                # Each instance (and batch size) has its own cold start: make every one
                # serve this shape.
                warming.sent += driver.burst(target.inputs, burst, target.version)
            taken.append(target)
        except InputRefused as refused:
            if not guessed or (target is targets[-1] and not taken):
                raise            # not a guess, or no shape at all was taken: the model refuses
            notes.append(f"shape {target.label} skipped: refused ({refused}); its size "
                         "for a dynamic dimension was a guess (no model_warmup entry gives one)")
        finally:
            connection.close()
    return taken, notes


def _until_steady(warming: _Warming, taken: list[_Target], rule: SteadyRule, requests: int,
                  deadline: Deadline, enough: int) -> str:
    """Each target in turn until steady, on its share of what is left of ``requests``; one
    line for those that did not get there ("" when all did), suggesting ``enough``."""
    unsteady: list[tuple[_Target, int]] = []
    for position, target in enumerate(taken):
        share = max(0, requests - warming.sent) // (len(taken) - position)
        connection = warming.driver.connect()
        try:
            for _ in range(share // warming.driver.steps):
                if rule.is_steady(target.series) or deadline.expired():
                    break
                warming.sample(connection, target)
        finally:
            connection.close()
        if not rule.is_steady(target.series):
            unsteady.append((target, share))
    return _not_steady(unsteady, len(taken), requests, deadline.expired(),
                       enough) if unsteady else ""


def _not_steady(unsteady: list[tuple[_Target, int]], shapes: int, requests: int,
                out_of_time: bool, enough: int) -> str:
    """One line for every shape that did not get steady: a line per shape said the same
    words five times over for a model of five shapes, and again in the command's error."""
    counted = f"{shapes} shape{'s' if shapes > 1 else ''}"
    if len(unsteady) < shapes:
        counted = f"{len(unsteady)} of {counted}, first {unsteady[0][0].label}"
    if out_of_time:
        return f"not steady within the timeout ({counted}; raise --timeout)"
    if not any(share for _, share in unsteady):
        return (f"not steady within --requests {requests} ({counted}; their first requests "
                f"used them all; try --requests {enough})")
    return f"not steady within --requests {requests} ({counted}; try --requests {enough})"


def _enough_requests(warming: _Warming, taken: list[_Target], rule: SteadyRule,
                     requests: int) -> int:
    """A --requests to suggest, counted once each shape's first requests are sent: twice
    what gives every shape two steady windows (a cold start settles over a few samples),
    at least the default, and more than was asked."""
    needed = warming.sent + len(taken) * (2 * rule.window - 1) * warming.driver.steps
    return max(2 * needed, DEFAULT_REQUESTS if requests < DEFAULT_REQUESTS else 2 * requests)


def cold_start_figures(endpoint: Endpoint, model: str, inputs: list, *,
                       requests: int = CHECK_REQUESTS, clients: int = CHECK_CLIENTS,
                       deadline: Deadline | None = None) -> ColdStart:
    """What users see now: each of ``clients`` fresh clients, one after the other, sends
    its first request and ``requests`` more; the median first against the median p50.

    Each connection is opened first (a readiness check, as clients do), so the first
    figure is the server's cold start, not TCP's. One request is one sample of a noisy
    machine: the median over a few clients is a figure, a single one is not. ``inputs``
    are tritonclient.http InferInputs for a model plain HTTP requests reach; warm-up
    measures stateful and decoupled models the way it warms them."""
    driver = Driver(endpoint, model, deadline or Deadline(60.0))
    return _cold_start_figures(driver, inputs, requests=requests, clients=clients)


def _cold_start_figures(driver: Driver, inputs: list, *, requests: int = CHECK_REQUESTS,
                        clients: int = CHECK_CLIENTS) -> ColdStart:
    """``cold_start_figures`` through ``driver``: a stateful model's first request is the
    start of a fresh client's first sequence, its p50 that of the ``requests`` sequences
    after it (each sequence's mean request); a streamed model's first request is timed to
    its first response too."""
    firsts, p50s, first_responses = [], [], []
    for _ in range(clients):
        connection = driver.connect()
        try:
            connection.ready(driver.name)
            first = driver.sample(connection, inputs)
            firsts.append(first.latencies[0])
            if first.first_response_ms is not None:
                first_responses.append(first.first_response_ms)
            p50s.append(statistics.median(
                driver.sample(connection, inputs).mean_ms for _ in range(requests)))
        finally:
            connection.close()
    return ColdStart(first_ms=statistics.median(firsts), p50_ms=statistics.median(p50s),
                     clients=clients,
                     first_response_ms=(statistics.median(first_responses)
                                        if first_responses else None))
