"""Work run from a roomy frame (tritonkit.frames) makes loops of calls that map no page
per call, at any depth it reaches: CPython 3.11 keeps a thread's frames in 16 KB chunks,
mapping one when a call finds the current one full and unmapping it when the call returns,
so a loop whose calls crossed a chunk's edge faulted a chunk in on every call. The export
runs from one; so does each test (tests/conftest.py)."""

from __future__ import annotations

import resource

from tritonkit.frames import from_a_roomy_frame

CALLS = 500


def _leaf() -> int:
    return 1


# A frame of some 500 bytes, larger than a step of _calls_at's recursion: at each chunk's
# edge, some depth leaves less room than it needs.
_leaf.__code__ = _leaf.__code__.replace(co_stacksize=64)


def _calls_at(depth: int) -> int:
    """Page faults of CALLS calls of a small function, made ``depth`` frames further down."""
    if depth:
        return _calls_at(depth - 1)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(CALLS):
        _leaf()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def _worst_depth_faults() -> int:
    """The most page faults of the loop at any of 400 depths: 400 frames of 100-odd bytes
    span more than two 16 KB chunks, so a loop at some depth meets an edge unless the
    chunk it runs in is roomy."""
    return max(_calls_at(depth) for depth in range(400))


def _descend(frames: int, then):
    return _descend(frames - 1, then) if frames else then()


# 4 KB frames: 100 of them leave behind the room any frame above them made.
_descend.__code__ = _descend.__code__.replace(co_stacksize=512)


def test_a_loop_of_calls_maps_no_page_per_call_at_any_depth_a_test_reaches():
    assert _worst_depth_faults() < CALLS // 10


def test_work_run_from_a_roomy_frame_maps_no_page_per_call_where_the_same_work_did():
    beyond_the_tests_room = 100
    assert _descend(beyond_the_tests_room, _worst_depth_faults) >= CALLS   # an edge met
    assert _descend(beyond_the_tests_room,
                    lambda: from_a_roomy_frame(_worst_depth_faults)) < CALLS // 10
