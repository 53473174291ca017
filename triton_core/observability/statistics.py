"""Per-model-version inference statistics, with Triton's semantics (statistics extension).

Every counter is updated on the event loop thread only, so nothing here takes a lock. The
statistics endpoints and the Prometheus collector read the same objects, so the metrics cost
nothing on the request path beyond these additions.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

#: Triton's failure reasons for ``nv_inference_request_failure``
FAILURE_REASONS = ("REJECTED", "CANCELED", "BACKEND", "OTHER")
#: default buckets (ms) of the latency histograms, as Triton's ``histogram_latencies``
DEFAULT_LATENCY_BUCKETS_MS = (100.0, 500.0, 2000.0, 5000.0)
#: Triton's default ``summary_quantiles``: (quantile, allowed error) pairs
DEFAULT_SUMMARY_QUANTILES = ((0.5, 0.05), (0.9, 0.01), (0.95, 0.001), (0.99, 0.001), (0.999, 0.001))
#: the window a summary's quantiles cover, as prometheus-cpp's default max_age
SUMMARY_MAX_AGE_S = 60.0
#: observations a summary keeps per window (the oldest go first beyond it)
SUMMARY_MAX_OBSERVATIONS = 8192
#: buckets of the time between a stream's responses (ms): token-to-token times of LLMs
RESPONSE_INTERVAL_BUCKETS_MS: Final = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000)
#: buckets of the responses a stream sends
RESPONSE_COUNT_BUCKETS: Final = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)


@dataclass(slots=True)
class Duration:
    """A count and a total time in nanoseconds (Triton's StatisticDuration)."""

    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns


@dataclass(slots=True)
class BatchStatistics:
    """Executions of one batch size."""

    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


@dataclass(slots=True)
class ExecutionTimes:
    """What the instance pool measured around one batch (nanoseconds)."""

    start_ns: int
    input_ns: int
    infer_ns: int
    output_ns: int


@dataclass(slots=True)
class StepTimes:
    """What the steps of one ensemble request spent computing (nanoseconds), summed: Triton
    reports these sums as the ensemble's compute times."""

    input_ns: int = 0
    infer_ns: int = 0
    output_ns: int = 0

    def add(self, input_ns: int, infer_ns: int, output_ns: int) -> None:
        self.input_ns += input_ns
        self.infer_ns += infer_ns
        self.output_ns += output_ns


class Histogram:
    """Cumulative-bucket histogram, exposed in Prometheus' shape."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(sorted(bounds))
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, int]]:
        """``(upper bound, cumulative count)`` pairs ending with ``+Inf``."""
        total = 0
        result = []
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            total += count
            result.append(("+Inf" if bound == float("inf") else repr(bound), total))
        return result


class Summary:
    """A Prometheus summary: quantiles over the observations of the last
    :data:`SUMMARY_MAX_AGE_S` seconds (at most :data:`SUMMARY_MAX_OBSERVATIONS`, computed
    exactly, so within any allowed error), and the count and sum of all observations."""

    __slots__ = ("count", "observations", "sum")

    def __init__(self) -> None:
        self.observations: deque[tuple[float, float]] = deque(maxlen=SUMMARY_MAX_OBSERVATIONS)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.observations.append((time.monotonic(), value))
        self.count += 1
        self.sum += value

    def quantiles(self, quantiles: Sequence[float]) -> list[float]:
        """The values at ``quantiles`` (NaN when nothing was observed in the window)."""
        oldest = time.monotonic() - SUMMARY_MAX_AGE_S
        while self.observations and self.observations[0][0] < oldest:
            self.observations.popleft()
        values = sorted(value for _, value in self.observations)
        if not values:
            return [float("nan")] * len(quantiles)
        last = len(values) - 1
        return [values[min(last, max(0, round(q * last)))] for q in quantiles]


class LatencySummaries:
    """Triton's ``summary_latencies``: per request, in microseconds."""

    __slots__ = ("compute_infer", "compute_input", "compute_output", "queue", "request")

    def __init__(self) -> None:
        self.request = Summary()
        self.queue = Summary()
        self.compute_input = Summary()
        self.compute_infer = Summary()
        self.compute_output = Summary()


class ModelStatistics:
    """Counters of one loaded model version."""

    def __init__(
        self,
        name: str,
        version: int,
        latency_buckets_ms: Sequence[float] | None = None,
        latency_summaries: bool = False,
    ):
        self.name = name
        self.version = version
        #: with ``--model-namespacing``: the model's repository (a metrics label)
        self.namespace = ""
        self.last_inference_ms = 0
        self.inference_count = 0
        self.execution_count = 0
        self.success = Duration()
        self.fail = Duration()
        self.queue = Duration()
        self.compute_input = Duration()
        self.compute_infer = Duration()
        self.compute_output = Duration()
        self.cache_hit = Duration()
        self.cache_miss = Duration()
        self.batches: dict[int, BatchStatistics] = {}
        self.failures: dict[str, int] = dict.fromkeys(FAILURE_REASONS, 0)
        #: beyond Triton: why each batch was sent (preferred size, max size, delay ...)
        self.dispatch_reasons: dict[str, int] = {}
        #: beyond Triton: executions by batch size (requests' batch sizes summed)
        self.batch_size_histogram: dict[int, int] = {}
        buckets = latency_buckets_ms
        self.request_latency_ms = Histogram(buckets) if buckets else None
        #: with latency histograms on, a decoupled model's stream (beyond Triton): the time
        #: between consecutive responses and the responses of each request
        self.response_interval_ms = Histogram(RESPONSE_INTERVAL_BUCKETS_MS) if buckets else None
        self.responses_per_request = Histogram(RESPONSE_COUNT_BUCKETS) if buckets else None
        #: ``summary_latencies``: None (nothing recorded) unless turned on
        self.summaries = LatencySummaries() if latency_summaries else None

    # -- recording (event loop only) -----------------------------------------------------------

    def record_execution(
        self, batch_size: int, queued_ns: Sequence[int], times: ExecutionTimes
    ) -> None:
        """One batch ran: Triton counts compute times once per request and once per batch."""
        requests = len(queued_ns)
        self.execution_count += 1
        self.inference_count += batch_size
        for enqueued in queued_ns:
            self.queue.add(max(0, times.start_ns - enqueued))
        self.compute_input.add(times.input_ns * requests, requests)
        self.compute_infer.add(times.infer_ns * requests, requests)
        self.compute_output.add(times.output_ns * requests, requests)
        if self.summaries is not None:
            self._summarize(queued_ns, times)
        self._add_batch(batch_size, times.input_ns, times.infer_ns, times.output_ns)

    def record_ensemble(self, batch_size: int, queue_ns: int, steps: StepTimes) -> None:
        """An ensemble request succeeded: Triton counts it as one execution of its batch
        size, computing for as long as its steps did together."""
        self.execution_count += 1
        self.inference_count += batch_size
        self.queue.add(queue_ns)
        self.compute_input.add(steps.input_ns)
        self.compute_infer.add(steps.infer_ns)
        self.compute_output.add(steps.output_ns)
        if self.summaries is not None:
            # queued at 0, started at queue_ns: the queue time is queue_ns
            times = ExecutionTimes(queue_ns, steps.input_ns, steps.infer_ns, steps.output_ns)
            self._summarize((0,), times)
        self._add_batch(batch_size, steps.input_ns, steps.infer_ns, steps.output_ns)

    def _add_batch(self, batch_size: int, input_ns: int, infer_ns: int, output_ns: int) -> None:
        batch = self.batches.get(batch_size)
        if batch is None:
            batch = self.batches[batch_size] = BatchStatistics()
        batch.compute_input.add(input_ns)
        batch.compute_infer.add(infer_ns)
        batch.compute_output.add(output_ns)
        self.batch_size_histogram[batch_size] = self.batch_size_histogram.get(batch_size, 0) + 1

    def _summarize(self, queued_ns: Sequence[int], times: ExecutionTimes) -> None:
        summaries = self.summaries
        assert summaries is not None
        for enqueued in queued_ns:
            summaries.queue.observe(max(0, times.start_ns - enqueued) / 1000)
            summaries.compute_input.observe(times.input_ns / 1000)
            summaries.compute_infer.observe(times.infer_ns / 1000)
            summaries.compute_output.observe(times.output_ns / 1000)

    def record_success(self, duration_ns: int, first_response_ns: int | None = None) -> None:
        """A request succeeded after ``duration_ns``; ``first_response_ns``: when a stream's
        first response left (the latency histogram is Triton's time to first response)."""
        self.success.add(duration_ns)
        self.last_inference_ms = time.time_ns() // 1_000_000
        if self.request_latency_ms is not None:
            first = duration_ns if first_response_ns is None else first_response_ns
            self.request_latency_ms.observe(first / 1e6)
        if self.summaries is not None:
            self.summaries.request.observe(duration_ns / 1000)

    def record_response_interval(self, interval_ns: int) -> None:
        """A decoupled model sent a response ``interval_ns`` after the one before."""
        if self.response_interval_ms is not None:
            self.response_interval_ms.observe(interval_ns / 1e6)

    def record_responses(self, count: int) -> None:
        """A decoupled model's stream ended after ``count`` responses with outputs."""
        if self.responses_per_request is not None:
            self.responses_per_request.observe(count)

    def record_failure(self, duration_ns: int, reason: str) -> None:
        self.fail.add(duration_ns)
        self.failures[reason] = self.failures.get(reason, 0) + 1
        self.last_inference_ms = time.time_ns() // 1_000_000

    def record_cache_hit(self, lookup_ns: int) -> None:
        """A response served from the cache: queue (and success) include it, compute does not."""
        self.cache_hit.add(lookup_ns)
        self.queue.add(0)

    def record_cache_miss(self, lookup_and_insert_ns: int) -> None:
        self.cache_miss.add(lookup_and_insert_ns)

    def record_dispatch(self, reason: str) -> None:
        self.dispatch_reasons[reason] = self.dispatch_reasons.get(reason, 0) + 1
