"""How warm-up's requests reach a model: plain HTTP, a gRPC stream for a decoupled
model, whole sequences for a stateful one (``Driver``)."""

from __future__ import annotations

import itertools
import os
import queue
import statistics
import time
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from tritonkit.client import Endpoint, example_input, infer_inputs, triton_message
from tritonkit.deadline import Deadline
from tritonkit.warmup._config import sequence_ids
from tritonkit.warmup._errors import InputRefused
from tritonkit.warmup._server import error_status, gone, infer_failed, model_ready

SEQUENCE_LENGTH = 3                 # a stateful model's warm-up sequence: start, continue, end


def _sequence_parameters(sequence: tuple | None) -> dict[str, Any]:
    if sequence is None:
        return {}
    sequence_id, start, end = sequence
    return {"sequence_id": sequence_id, "sequence_start": start, "sequence_end": end}


class _HttpRequests:
    """Plain request and response over HTTP (one connection per request in flight), each
    call bounded by the deadline's time left when it is made: a connection serves a whole
    shape's steady run, so its own socket timeout, fixed when it opens, would let a request
    that hangs late in the run outlive the deadline by up to that much again."""

    def __init__(self, endpoint: Endpoint, deadline: Deadline, concurrency: int = 1) -> None:
        self.deadline = deadline
        left = max(0.5, deadline.left())
        self.client = endpoint.http(concurrency=concurrency, connection_timeout=min(5.0, left),
                                    network_timeout=left)

    def _bounded(self):
        from gevent import Timeout

        return Timeout(max(0.1, self.deadline.left()), TimeoutError("no answer within the deadline"))

    @staticmethod
    def inputs(shape: dict[str, tuple[str, list[int]]], rng: np.random.Generator) -> list:
        import tritonclient.http as httpclient

        return _filled(httpclient, shape, rng)

    def ready(self, name: str) -> bool:
        return model_ready(self.client, name)

    def infer(self, name: str, inputs: list, version: str, sequence: tuple | None) -> None:
        """One request, answered (a plain response is its first and its last)."""
        with self._bounded():
            self.client.infer(name, inputs, model_version=version,
                              **_sequence_parameters(sequence))

    def infer_all(self, name: str, inputs: list, version: str,
                  sequences: list[tuple | None]) -> None:
        with self._bounded():
            pending = [self.client.async_infer(name, inputs, model_version=version,
                                               **_sequence_parameters(sequence))
                       for sequence in sequences]
            for request in pending:
                request.get_result()

    def close(self) -> None:
        self.client.close()


class _StreamRequests:
    """A decoupled model's requests over one gRPC stream (Triton's HTTP endpoint refuses
    such a model), each until its final response: asked for with
    ``enable_empty_final_response``, Triton flags it ``triton_final_response``, as an empty
    response when the model sends the final flag on its own. The time each request's first
    response came is kept too: a streaming model's user waits for that one (its time to
    first token), and a cold start can sit before it or after it. The stream ends with the
    deadline's time left when it opens; waits for a response take what is left then."""

    def __init__(self, endpoint: Endpoint, deadline: Deadline, concurrency: int = 1) -> None:
        # ``concurrency`` is _HttpRequests': one stream carries any number in flight.
        self.deadline = deadline
        self.client = endpoint.grpc()
        self.responses: queue.Queue = queue.Queue()
        self.request_ids = itertools.count(1)
        self.broken = False             # a request failed: others may still be in flight
        try:
            self.client.start_stream(
                callback=lambda result, error: self.responses.put(
                    (result, error, time.perf_counter())),
                stream_timeout=max(0.5, deadline.left()))
        except BaseException:
            self.client.close()
            raise

    @staticmethod
    def inputs(shape: dict[str, tuple[str, list[int]]], rng: np.random.Generator) -> list:
        import tritonclient.grpc as grpcclient

        return _filled(grpcclient, shape, rng)

    def ready(self, name: str) -> bool:
        try:
            return bool(self.client.is_model_ready(
                name, client_timeout=max(0.5, self.deadline.left())))
        except Exception as exc:
            raise gone(exc) from None

    def infer(self, name: str, inputs: list, version: str, sequence: tuple | None) -> float:
        """One request, until its final response; when its first response came
        (``time.perf_counter``)."""
        [first] = self.infer_all(name, inputs, version, [sequence])
        return first

    def infer_all(self, name: str, inputs: list, version: str,
                  sequences: list[tuple | None]) -> list[float]:
        """One request per sequence, in flight together, each until its final response;
        when each one's first response came, in the order they were sent."""
        try:
            return self._answered(name, inputs, version, sequences)
        except BaseException:
            self.broken = True
            raise

    def _answered(self, name: str, inputs: list, version: str,
                  sequences: list[tuple | None]) -> list[float]:
        sent, waiting, firsts = [], set(), {}
        for sequence in sequences:
            request_id = str(next(self.request_ids))
            try:
                self.client.async_stream_infer(name, inputs, model_version=version,
                                               request_id=request_id,
                                               enable_empty_final_response=True,
                                               **_sequence_parameters(sequence))
            except Exception as exc:
                # A stream that broke (no server at that address, say) tells why through
                # the callback; the refusal to send only says that it did. Any other
                # failure to send is its own cause.
                raise self._reported_error() or exc from None
            waiting.add(request_id)
            sent.append(request_id)
        while waiting:
            result, error, at = self._next(self.deadline.left())
            if error is not None:
                raise error
            response = result.get_response()
            firsts.setdefault(response.id, at)
            if response.parameters["triton_final_response"].bool_param:
                waiting.discard(response.id)
        return [firsts[request_id] for request_id in sent]

    def _next(self, timeout: float) -> tuple[Any, Exception | None, float]:
        """The next response or error on the stream, and when it came."""
        try:
            result, error, at = self.responses.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError("no final response within the deadline") from None
        if error is not None and error_status(error) == "StatusCode.DEADLINE_EXCEEDED":
            return None, TimeoutError(triton_message(error)), at      # the stream's own end
        return result, error, at

    def _reported_error(self) -> Exception | None:
        """The error the stream's callback reported (it may lag the stream's end a little)."""
        try:
            while True:
                _, error, _ = self._next(min(1.0, self.deadline.left()))
                if error is not None:
                    return error
        except TimeoutError:
            return None

    def close(self) -> None:
        # Cancelled only after a failed request, whose stream may hold others still in
        # flight: a graceful stop would wait for them, past the deadline. A stream answered
        # in full ends gracefully: Triton 2.51 holds a model for a moment after its stream
        # is cancelled, and a server stopped in that moment waits out its whole exit
        # timeout (30 s) for it.
        try:
            self.client.stop_stream(cancel_requests=self.broken)
        finally:
            self.client.close()


def _peek(items: Iterator) -> tuple[Any, Iterator]:
    first = next(items)
    return first, itertools.chain([first], items)


def _filled(protocol: Any, shape: dict[str, tuple[str, list[int]]],
            rng: np.random.Generator) -> list:
    return infer_inputs(protocol, ((name, datatype,
                                    example_input(datatype, dims, rng, name=f"input {name}"))
                                   for name, (datatype, dims) in shape.items()))


@dataclass(frozen=True)
class Sample:
    """One warm-up sample: each of its requests' latency until its (final) response, and
    for a decoupled model its first request's time to its first response (ms)."""

    latencies: list[float]
    first_response_ms: float | None = None

    @property
    def mean_ms(self) -> float:
        return statistics.fmean(self.latencies)


@dataclass
class Driver:
    """How warm-up sends one model its requests, as its config asks: plain HTTP requests;
    over a gRPC stream, each until its final response, for a decoupled model; and for a
    stateful one (sequence batching), each sample a whole sequence of SEQUENCE_LENGTH
    requests, start to end, so that no sequence slot stays held after warm-up. An
    iterative sequence model gets plain requests: Triton gives each one a sequence."""

    endpoint: Endpoint
    name: str
    deadline: Deadline
    decoupled: bool = False
    sequence_ids: Iterator[int | str] | None = None
    first_id: int | str | None = None          # said in the note, to find them in a log
    # Where the server's log (a file here) stood when this model's warm-up began: what it
    # wrote since is what a crash of the model says.
    log_from: int | None = None

    @classmethod
    def for_model(cls, endpoint: Endpoint, name: str, config: dict,
                  deadline: Deadline) -> Driver:
        batching = config.get("sequence_batching")
        first = ids = None
        if batching is not None and not batching.get("iterative_sequence"):
            first, ids = _peek(sequence_ids(config))
        return cls(endpoint, name, deadline,
                   decoupled=bool(config.get("model_transaction_policy", {}).get("decoupled")),
                   sequence_ids=ids, first_id=first, log_from=_log_size(endpoint.log_path))

    @property
    def transport(self) -> type[_HttpRequests | _StreamRequests]:
        return _StreamRequests if self.decoupled else _HttpRequests

    @property
    def steps(self) -> int:
        """Requests in one sample."""
        return 1 if self.sequence_ids is None else SEQUENCE_LENGTH

    def connect(self, concurrency: int = 1) -> _HttpRequests | _StreamRequests:
        return self.transport(self.endpoint, self.deadline, concurrency)

    def inputs(self, shape: dict[str, tuple[str, list[int]]], rng: np.random.Generator) -> list:
        return self.transport.inputs(shape, rng)

    def _steps(self, count: int) -> list[list[tuple | None]]:
        """For each step, what each of ``count`` samples sends: no sequence (one step), or
        whole sequences of fresh IDs step by step (a sequence's next request waits for the
        answer to its last, or it could overtake it)."""
        if self.sequence_ids is None:
            return [[None] * count]
        ids = [next(self.sequence_ids) for _ in range(count)]
        last = SEQUENCE_LENGTH - 1
        return [[(i, step == 0, step == last) for i in ids] for step in range(SEQUENCE_LENGTH)]

    def sample(self, connection: _HttpRequests | _StreamRequests, inputs: list,
               version: str = "") -> Sample:
        """One warm-up sample on ``connection``: each of its requests' latency in ms, and a
        streamed first request's time to its first response."""
        latencies, first_response = [], None
        steps = self._steps(1)
        for [sequence] in steps:
            started = time.perf_counter()
            try:
                answered = connection.infer(self.name, inputs, version, sequence)
            except Exception as exc:
                raise self._failed(exc, connection, inputs, version, steps, started) from None
            latencies.append((time.perf_counter() - started) * 1e3)
            if answered is not None and first_response is None:
                first_response = (answered - started) * 1e3
        self.deadline.moved()
        return Sample(latencies, first_response)

    def burst(self, inputs: list, count: int, version: str = "") -> int:
        """``count`` samples in flight at once, on a connection of their own; the requests
        sent. An instance runs one execution at a time, so (unless a batcher merges them)
        each of ``count`` instances serves one; a stateful model's concurrent sequences
        fill its sequence slots, and so its batches."""
        connection = self.connect(concurrency=count)
        started = time.perf_counter()
        steps = self._steps(count)
        try:
            for step in steps:
                connection.infer_all(self.name, inputs, version, step)
        except Exception as exc:
            raise self._failed(exc, connection, inputs, version, steps, started) from None
        finally:
            connection.close()
        self.deadline.moved()
        return count * len(steps)

    def _failed(self, exc: Exception, connection: _HttpRequests | _StreamRequests,
                inputs: list, version: str, steps: list[list[tuple | None]],
                started: float) -> Exception:
        """The error for a failed request; first, when the model refused it mid-sequence,
        the sequences it belonged to are ended (best effort, within the deadline): each
        would otherwise hold its sequence slot until max_sequence_idle_microseconds, and
        warm-up goes on past a refused guessed shape. A sequence refused at its START is
        ended too: Triton's sequence batcher gives a START its slot before the model runs
        it, so a START the model refuses holds the slot all the same."""
        failure = infer_failed(exc, self.endpoint, self.name, self.deadline, started,
                               self.log_from)
        if isinstance(failure, InputRefused) and steps[0][0] is not None:
            for sequence_id, _, _ in steps[0]:
                if self.deadline.expired():
                    break
                try:
                    connection.infer(self.name, inputs, version, (sequence_id, False, True))
                except Exception:
                    pass        # ended or not, the refusal is what to report
        return failure

    def describe(self) -> str:
        """How this model was warmed, when not with plain HTTP requests."""
        how = []
        if self.decoupled:
            how.append(f"decoupled: streamed over gRPC at {self.endpoint.grpc_url}, each "
                       "request until its final response, its first response timed too")
        if self.sequence_ids is not None:
            how.append(f"stateful: each sample a whole sequence of {SEQUENCE_LENGTH} requests "
                       f"(start, continue, end), correlation IDs from {self.first_id} up")
        return "; ".join(how)


def _log_size(log_path: str | None) -> int | None:
    """How long the server's log is now (None where it is no file here)."""
    try:
        return os.lstat(log_path).st_size if log_path else None
    except OSError:
        return None
