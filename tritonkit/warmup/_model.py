"""Warming one model: every shape's cold first request, a burst for its instances, then
each shape until steady; and what a fresh client's first request costs after it."""

from __future__ import annotations

import statistics
from dataclasses import replace

import numpy as np

from tritonkit.client import Endpoint
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
from tritonkit.warmup._results import ColdStart, ModelWarmup, SteadyRule
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
    shapes = warmup_shapes(config)
    instances = model_instances(config)
    # A burst reaches every instance; a stateful model's, every sequence slot of each.
    together = (min(instances * sequence_slots(config), MAX_SEQUENCES_AT_ONCE)
                if "sequence_batching" in config else instances)
    rule = replace(rule, window=max(rule.window, instances))  # a window spans them all
    rng = np.random.default_rng(0)
    prepared = [driver.inputs(shape, rng) for shape in shapes]
    targets = [(version, i) for version in (versions if len(versions) > 1 else [""])
               for i in range(len(shapes))]
    labels = [f"v{v} {describe_shape(shapes[i])}" if v else describe_shape(shapes[i])
              for v, i in targets]
    series: list[list[float]] = [[] for _ in targets]
    firsts: list[float | None] = [None for _ in targets]
    notes: list[str] = []
    sent = 0

    def send(t: int) -> None:
        nonlocal sent
        version, i = targets[t]
        progress(f"warming {name}: shape {t + 1}/{len(targets)} ({labels[t]}), "
                 f"{sent} requests sent")
        latencies = driver.sample(connection, prepared[i], version)
        if firsts[t] is None:
            firsts[t] = latencies[0]
        series[t].append(statistics.fmean(latencies))
        sent += len(latencies)

    usable = []
    for t, (version, i) in enumerate(targets):
        if deadline.expired():
            break
        connection = driver.connect()     # each call bounded by the time left now
        try:
            send(t)
            if together > 1:
                # Each instance (and batch size) has its own cold start: make every one
                # serve this shape.
                sent += driver.burst(prepared[i], together, version)
            usable.append(t)
        except InputRefused as refused:
            if not guessed_shapes(config) or (t == len(targets) - 1 and not usable):
                raise            # not a guess, or no shape at all was taken: the model refuses
            notes.append(f"shape {labels[t]} skipped: refused ({refused}); its size "
                         "for a dynamic dimension was a guess (no model_warmup entry gives one)")
        finally:
            connection.close()
    for position, t in enumerate(usable):
        share = max(0, requests - sent) // (len(usable) - position)
        connection = driver.connect()
        try:
            for _ in range(share // driver.steps):
                if rule.is_steady(series[t]) or deadline.expired():
                    break
                send(t)
        finally:
            connection.close()
        if not rule.is_steady(series[t]):
            why = ("the deadline" if deadline.expired() else
                   f"its share of the requests, {share} of {requests}" if share else
                   f"--requests {requests}: each shape's first requests took them all")
            notes.append(f"not steady within {why} (at {labels[t]})")
    steady = bool(usable) and all(rule.is_steady(series[t]) for t in usable)
    if not usable and not notes:
        notes.append("not reached: out of time")
    first = firsts[usable[0]] if usable else None
    # A p50 only from a steady series: one still holding its cold request would read the
    # cold start as the norm (first / p50 = 1.0 on a model that was cold).
    p50 = (statistics.median(series[usable[0]][-rule.window:])
           if usable and rule.is_steady(series[usable[0]]) else None)
    after = None
    if check and steady:
        progress(f"measuring {name}: a fresh client's first request")
        after = _cold_start_figures(driver, prepared[targets[usable[0]][1]])
    return ModelWarmup(model=name, steady=steady, requests=sent, load_s=load_s, first_ms=first,
                       steady_p50_ms=p50, after=after, shapes=labels,
                       note="; ".join(filter(None, [driver.describe(), *notes])), cold=cold,
                       series_ms={labels[t]: [round(v, 3) for v in series[t]] for t in usable})


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
    after it (each sequence's mean request)."""
    firsts, p50s = [], []
    for _ in range(clients):
        connection = driver.connect()
        try:
            connection.ready(driver.name)
            firsts.append(driver.sample(connection, inputs)[0])
            p50s.append(statistics.median(
                statistics.fmean(driver.sample(connection, inputs)) for _ in range(requests)))
        finally:
            connection.close()
    return ColdStart(first_ms=statistics.median(firsts), p50_ms=statistics.median(p50s),
                     clients=clients)
