"""Stateful models: sequences of requests with correlation IDs, as perf_analyzer sends them.

A model with ``sequence_batching`` keeps state per correlation ID: each request names its
sequence, the first says START, the last END, and Triton refuses a request without an ID.
A load test therefore sends whole sequences — ``--sequence-length`` requests each (20, its
length varied by up to ``--sequence-length-variation`` %, 20, from one sequence to the
next: perf_analyzer's defaults) — and each in-flight slot owns one live sequence at a time,
sending its requests one after the other (perf_analyzer's ``--serial-sequences``: a
sequence's requests reach the model in order, as its state needs):

- closed loop: each of ``--concurrency``'s users runs a sequence, and the next one with a
  new ID as soon as it ends (perf_analyzer's concurrency mode);
- open loop: ``--num-of-sequences`` sequences (4) are live at once, perf_analyzer's request
  rate mode; each arrival is sent on a live sequence with no request out, so the
  requests in flight are at most the live sequences, and an arrival that finds every one
  busy waits (the server's saturation, counted as such).

Each live sequence has an ID no other has: slot ``g`` of all ``S`` slots of a level (all
workers together) numbers its ``n``-th sequence ``g + S * n`` from a random point of the
second quarter of what the CORRID control input holds (warm-up takes its IDs from the
upper half; clients that count from 1 stay far below), or from ``--sequence-id-range``'s
start, wrapping at its end. When the measurement ends, a sequence still open is sent one
more request, with END, so none is left holding a sequence slot of the server's.
"""

from __future__ import annotations

import random
import secrets
from dataclasses import dataclass

from tritonkit.errors import UsageError

DEFAULT_LENGTH = 20                 # perf_analyzer's --sequence-length
DEFAULT_VARIATION_PCT = 20.0        # ... --sequence-length-variation
DEFAULT_OPEN_SEQUENCES = 4          # ... --num-of-sequences (request rate mode)
MAX_LENGTH = 1_000_000
# tritonclient's gRPC client sends a numeric ID as int64: the largest any ID may be, below.
_INT64_IDS = 2**63
_ID_LIMITS = {"TYPE_INT32": 2**31, "TYPE_UINT32": 2**32}

#: One request of a sequence: (correlation ID, START, END).
Step = tuple[int | str, bool, bool]


@dataclass(frozen=True)
class Sequencing:
    """What a stateful model's config says its load test must know.

    ``string_ids``: its CORRID control input is TYPE_STRING (IDs are sent as strings);
    ``id_limit``: numeric IDs stay below it (the CORRID type's positive range: Triton cuts
    an ID to 32 bits for a 32-bit input); ``batcher_slots``: sequences its sequence batcher
    runs at once over all instances — more wait in its backlog until one ends.
    """

    string_ids: bool
    id_limit: int
    batcher_slots: int


def sequencing(config: dict) -> Sequencing | None:
    """The sequencing of a model from its config (``get_model_config``); None: it has no
    ``sequence_batching``, so it is stateless."""
    if "sequence_batching" not in config:
        return None
    from tritonkit.warmup import model_instances, sequence_slots

    corrid = _corrid_type(config)
    return Sequencing(string_ids=corrid == "TYPE_STRING", id_limit=_ID_LIMITS.get(corrid, _INT64_IDS),
                      batcher_slots=sequence_slots(config) * model_instances(config))


def _corrid_type(config: dict) -> str | None:
    for control_input in config["sequence_batching"].get("control_input", []):
        for control in control_input.get("control", []):
            if control.get("kind") == "CONTROL_SEQUENCE_CORRID":
                return control.get("data_type")
    return None


def parse_id_range(text: str | None) -> tuple[int, int | None] | None:
    """``--sequence-id-range START[:END]`` (END excluded), as perf_analyzer's."""
    if not text:
        return None
    start, colon, end = text.partition(":")
    try:
        bounds = (int(start), int(end) if colon and end.strip() else None)
    except ValueError:
        bounds = None
    if bounds is None or bounds[0] < 1 or (bounds[1] is not None and bounds[1] <= bounds[0]):
        raise UsageError(f"--sequence-id-range {text} is not START[:END] with 1 <= START < END",
                         hint="e.g. --sequence-id-range 1000:2000 (END excluded), or 1000 for no end")
    return bounds


@dataclass(frozen=True)
class SequencePlan:
    """One worker's sequences at one level (picklable: it travels with the worker's plan).

    The worker's slot ``i`` is slot ``first_slot + i`` of the ``all_slots`` of the level;
    IDs are numbers in ``[id_start, id_end)`` from ``id_start + offset`` on (with a
    ``prefix``, that number after it, as a string).
    """

    length: int
    variation: float                    # a fraction: 0.2 is +/- 20 %
    first_slot: int
    all_slots: int
    id_start: int
    id_end: int
    offset: int
    prefix: str | None
    seed: int

    def sequence_id(self, slot: int, n: int) -> int | str:
        """The ID of the ``n``-th sequence (from 0) of this worker's slot ``slot``."""
        number = self.id_start + (self.offset + self.first_slot + slot + self.all_slots * n) \
            % (self.id_end - self.id_start)
        return number if self.prefix is None else f"{self.prefix}{number}"

    def lengths(self, slot: int) -> random.Random:
        return random.Random(f"{self.seed}/{self.first_slot + slot}")

    def length_of(self, rng: random.Random) -> int:
        """A sequence's length: ``length`` +/- up to ``variation`` of it, at least 1."""
        spread = int(self.length * self.variation)
        return max(1, self.length + (rng.randint(-spread, spread) if spread else 0))


def plan_sequences(sequencing: Sequencing, slots: list[int], length: int, variation_pct: float,
                   id_range: tuple[int, int | None] | None, seed: int) -> list[SequencePlan]:
    """Each worker's SequencePlan for a level whose workers hold ``slots`` (one live
    sequence a slot). Without ``id_range``: a random start in the second quarter of the
    IDs the model takes (a new one each level, so a level never reuses an ID of the one before)."""
    total = sum(slots)
    limit = sequencing.id_limit
    if id_range is None:
        start, end = limit // 4, limit // 2
        offset = secrets.randbelow(end - start)
    else:
        start, end = id_range[0], id_range[1] if id_range[1] is not None else limit
        offset = 0
        if end > limit:
            raise UsageError(f"--sequence-id-range ends at {end}, past what the model's CORRID input "
                             f"holds (IDs below {limit})", hint=f"keep the range below {limit}")
        if end - start < total:
            raise UsageError(f"--sequence-id-range {start}:{end} holds {end - start} IDs for {total} "
                             "sequences live at once: IDs would collide",
                             hint=f"widen it to at least {total} IDs")
    prefix = f"tritonkit-loadtest-{secrets.token_hex(4)}-" if sequencing.string_ids else None
    plans, first = [], 0
    for n in slots:
        plans.append(SequencePlan(length=length, variation=variation_pct / 100, first_slot=first,
                                  all_slots=total, id_start=start, id_end=end, offset=offset,
                                  prefix=prefix, seed=seed))
        first += n
    return plans


def probe_step(sequencing: Sequencing, id_range: tuple[int, int | None] | None) -> Step:
    """The check before the run: a sequence of one request (START and END), an ID of the
    run's range (every level's sequences start after it has ended)."""
    plan = plan_sequences(sequencing, [1], 1, 0.0, id_range, seed=0)[0]
    return plan.sequence_id(0, 0), True, True


class LiveSequence:
    """One slot's sequences, one after the other: the next request's ID and flags, and
    what became of them (a worker's own, never shared)."""

    def __init__(self, plan: SequencePlan, slot: int) -> None:
        self._plan, self._slot = plan, slot
        self._rng = plan.lengths(slot)
        self._count = 0                 # sequences begun
        self._left = 0                  # requests still to send in the current one
        self._id: int | str = 0
        self.open = False               # a START went out and no END has been answered
        self.completed = 0              # sequences whose END was answered
        self.failed_ends = 0            # ... whose END failed: the server may hold them still
        self.cut_short = 0              # sequences ended early by close()
        self._ending = False

    def next(self) -> Step:
        """The next request: a new sequence's START after the last one's END."""
        start = self._left == 0
        if start:
            self._id = self._plan.sequence_id(self._slot, self._count)
            self._count += 1
            self._left = self._plan.length_of(self._rng)
            self.open = True
        self._left -= 1
        self._ending = self._left == 0
        return self._id, start, self._ending

    def close(self) -> Step:
        """The request that ends the sequence in progress (the run is over): early, unless
        it was the one left to send anyway."""
        self.cut_short += self._left > 1
        self._left = 0
        self._ending = True
        return self._id, False, True

    def answered(self, ok: bool) -> None:
        """The request last given out came back: ``ok``, or with an error."""
        if self._ending:
            self.open = False
            if ok:
                self.completed += 1
            else:
                self.failed_ends += 1
