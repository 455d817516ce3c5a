"""Each test runs from a roomy frame (tests/conftest.py): a loop of calls at any depth a
test reaches maps no page per call. CPython 3.11 keeps a thread's frames in 16 KB chunks,
mapping one when a call finds the current one full and unmapping it when the call returns,
so a loop whose calls cross a chunk's edge faulted a chunk in on every call (in an xdist
worker the full-size GPT-2 export took 42 CPU s there, 24 s without)."""

from __future__ import annotations

import resource

CALLS = 500


def _leaf() -> int:
    return 1


# A frame of some 500 bytes, larger than a step of the recursion below: at each chunk's
# edge some depth leaves less room than it needs.
_leaf.__code__ = _leaf.__code__.replace(co_stacksize=64)


def _faults_of_calls_at(depth: int) -> int:
    """Page faults of CALLS calls of a small function, made ``depth`` frames further down."""
    if depth:
        return _faults_of_calls_at(depth - 1)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(CALLS):
        _leaf()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def test_a_loop_of_calls_maps_no_page_per_call_at_any_depth_a_test_reaches():
    # 400 frames of 100-odd bytes span more than two 16 KB chunks: the old way, the loop
    # at an edge's depth faulted a page or more per call.
    worst = max(range(400), key=_faults_of_calls_at)
    assert _faults_of_calls_at(worst) < CALLS // 10, f"at depth {worst}"
