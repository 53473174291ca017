"""Prometheus metrics with Triton's names, read from the statistics at scrape time.

A collector on a registry of the server's own (never the global one) turns each model
version's :class:`~triton_core.observability.statistics.ModelStatistics` into metric families when
``/metrics`` is scraped, so requests pay nothing for metrics.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from triton_core.observability.metrics_options import MetricsOptions
from triton_core.observability.statistics import Histogram
from triton_core.shared_memory.cuda import HOST_COPIES, cuda_support

if TYPE_CHECKING:
    import falcon.asgi

    from triton_core.cache.base import CacheStatistics
    from triton_core.observability.statistics import Duration, ModelStatistics, Summary
    from triton_core.server.core import Server
    from triton_core.server.model import LoadedModel

#: Prometheus text exposition format
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


#: families beyond Triton's for decoupled models' streams
RESPONSE_INTERVAL_FAMILY = "nv_inference_response_interval_histogram_ms"
RESPONSES_PER_REQUEST_FAMILY = "nv_inference_responses_per_request"


_COUNTERS = {
    "nv_inference_request_success": "Number of successful inference requests, all batch sizes",
    "nv_inference_request_failure": "Number of failed inference requests, all batch sizes",
    "nv_inference_count": "Number of inferences performed (does not include cached requests)",
    "nv_inference_exec_count": (
        "Number of model executions performed (does not include cached requests)"
    ),
}
_DURATIONS = {
    "nv_inference_request_duration_us": (
        "Cumulative inference request duration in microseconds (includes cached requests)"
    ),
    "nv_inference_queue_duration_us": (
        "Cumulative inference queuing duration in microseconds (includes cached requests)"
    ),
    "nv_inference_compute_input_duration_us": (
        "Cumulative compute input duration in microseconds (does not include cached requests)"
    ),
    "nv_inference_compute_infer_duration_us": (
        "Cumulative compute inference duration in microseconds (does not include cached requests)"
    ),
    "nv_inference_compute_output_duration_us": (
        "Cumulative inference compute output duration in microseconds "
        "(does not include cached requests)"
    ),
}
_SUMMARIES = {
    "nv_inference_request_summary_us": (
        "request",
        "Summary of inference request duration in microseconds (includes cached requests)",
    ),
    "nv_inference_queue_summary_us": (
        "queue",
        "Summary of inference queuing duration in microseconds (includes cached requests)",
    ),
    "nv_inference_compute_input_summary_us": (
        "compute_input",
        "Summary of compute input duration in microseconds (does not include cached requests)",
    ),
    "nv_inference_compute_infer_summary_us": (
        "compute_infer",
        "Summary of compute inference duration in microseconds (does not include cached requests)",
    ),
    "nv_inference_compute_output_summary_us": (
        "compute_output",
        "Summary of inference compute output duration in microseconds "
        "(does not include cached requests)",
    ),
}
_CACHE = {
    "nv_cache_num_hits_per_model": "Number of cache hits per model",
    "nv_cache_num_misses_per_model": "Number of cache misses per model",
    "nv_cache_hit_duration_per_model": "Total cache hit duration per model, in microseconds",
    "nv_cache_miss_duration_per_model": (
        "Total cache miss (insert+lookup) duration per model, in microseconds"
    ),
}


def _family(name: str, documentation: str, kind: str) -> Metric:
    metric = Metric(name, documentation, kind)
    metric.name = name  # Metric drops a "_total" suffix from counter names; Triton has none
    return metric


class TritonCollector(Collector):
    """Triton's metric families for every ready model version, plus CPU metrics."""

    def __init__(self, server: Server, options: MetricsOptions) -> None:
        self._server = server
        self._options = options
        self._cpu = _CpuSampler(options.interval_ms / 1000)

    def collect(self) -> Iterator[Metric]:
        try:
            models = self._server.models.ready_models()
        except Exception:  # not started yet, or stopped
            models = []
        yield from self._model_families(models)
        cache = getattr(self._server, "cache", None)
        if cache is not None:
            yield from _cache_families(cache.statistics())
        yield from _pinned_memory_families(self._options.pinned_memory_pool_bytes)
        yield from _cuda_host_copy_families()
        if self._options.allow_cpu_metrics:
            yield from self._cpu.families()
        custom = getattr(self._server, "custom_metrics", None)
        if custom is not None:
            yield from custom.collect()

    def _model_families(self, models: list[LoadedModel]) -> Iterator[Metric]:
        counters = _COUNTERS
        families = {name: _family(name, doc, "counter") for name, doc in counters.items()}
        pending = _family(
            "nv_inference_pending_request_count",
            "Instantaneous number of pending requests awaiting execution per-model.",
            "gauge",
        )
        durations = _DURATIONS
        duration_families = {n: _family(n, d, "counter") for n, d in durations.items()}
        cache = _CACHE
        cache_families = {n: _family(n, d, "counter") for n, d in cache.items()}
        summaries = {n: _family(n, d, "summary") for n, (_, d) in _SUMMARIES.items()}
        histogram = _family(
            "nv_inference_first_response_histogram_ms",
            "Duration from request to first response in milliseconds",
            "histogram",
        )
        # beyond Triton, for decoupled models (an LLM's tokens): the time between a stream's
        # responses and the responses per request; on with Triton's latency histograms
        intervals = _family(
            RESPONSE_INTERVAL_FAMILY,
            "Time between consecutive responses of a decoupled model's request in milliseconds",
            "histogram",
        )
        response_counts = _family(
            RESPONSES_PER_REQUEST_FAMILY,
            "Responses a decoupled model sent per request",
            "histogram",
        )
        batch_sizes = _family(
            "nv_inference_batch_size",
            "Executions by batch size (beyond Triton: shows why throughput is what it is)",
            "histogram",
        )
        dispatch = _family(
            "nv_inference_batch_dispatch",
            "Batches sent to an instance, by why the batcher sent them (beyond Triton)",
            "counter",
        )
        unhealthy = _family(
            "nv_model_instance_unhealthy",
            "Instances that ran past execute_timeout_secs and have not returned (beyond Triton)",
            "gauge",
        )
        timeouts = _family(
            "nv_model_execute_timeout",
            "Batches that ran past execute_timeout_secs and failed (beyond Triton)",
            "counter",
        )
        for model in models:
            stats: ModelStatistics = model.statistics
            labels = {"model": stats.name, "version": str(stats.version)}
            if stats.namespace:  # Triton's label when model namespacing is on
                labels["namespace"] = stats.namespace
            for tag, tag_value in model.config.metric_tags.items():  # as Triton: "_<tag>"
                labels["_" + tag] = tag_value
            labels = _in_name_order(labels)
            families["nv_inference_request_success"].add_sample(
                "nv_inference_request_success", labels, stats.success.count
            )
            for reason, count in stats.failures.items():
                families["nv_inference_request_failure"].add_sample(
                    "nv_inference_request_failure", _in_name_order(labels, reason=reason), count
                )
            families["nv_inference_count"].add_sample(
                "nv_inference_count", labels, stats.inference_count
            )
            families["nv_inference_exec_count"].add_sample(
                "nv_inference_exec_count", labels, stats.execution_count
            )
            pending.add_sample(
                "nv_inference_pending_request_count", labels, model.scheduler.pending_count
            )
            if self._options.counter_latencies:
                request_ns = stats.success.ns + stats.fail.ns
                for name, value in (
                    ("nv_inference_request_duration_us", request_ns),
                    ("nv_inference_queue_duration_us", stats.queue.ns),
                    ("nv_inference_compute_input_duration_us", stats.compute_input.ns),
                    ("nv_inference_compute_infer_duration_us", stats.compute_infer.ns),
                    ("nv_inference_compute_output_duration_us", stats.compute_output.ns),
                ):
                    duration_families[name].add_sample(name, labels, value // 1000)
            if stats.cache_hit.count or stats.cache_miss.count:
                for name, value in (
                    ("nv_cache_num_hits_per_model", stats.cache_hit.count),
                    ("nv_cache_num_misses_per_model", stats.cache_miss.count),
                    ("nv_cache_hit_duration_per_model", _micros(stats.cache_hit)),
                    ("nv_cache_miss_duration_per_model", _micros(stats.cache_miss)),
                ):
                    cache_families[name].add_sample(name, labels, value)
            if self._options.histogram_latencies and stats.request_latency_ms is not None:
                _add_histogram(histogram, labels, stats.request_latency_ms)
                if model.decoupled:
                    for family, stream_histogram in (
                        (intervals, stats.response_interval_ms),
                        (response_counts, stats.responses_per_request),
                    ):
                        if stream_histogram is not None:
                            _add_histogram(family, labels, stream_histogram)
            if stats.summaries is not None:
                for name, (field, _) in _SUMMARIES.items():
                    _add_summary(
                        summaries[name],
                        labels,
                        getattr(stats.summaries, field),
                        self._options.summary_quantiles,
                    )
            _add_batch_sizes(batch_sizes, labels, stats.batch_size_histogram)
            for reason, count in sorted(stats.dispatch_reasons.items()):
                dispatch.add_sample(
                    "nv_inference_batch_dispatch", _in_name_order(labels, reason=reason), count
                )
            watch = model.pool.watch
            if watch is not None:  # only models that set execute_timeout_secs
                unhealthy.add_sample("nv_model_instance_unhealthy", labels, watch.unhealthy_count)
                timeouts.add_sample("nv_model_execute_timeout", labels, watch.timeouts)
        yield from families.values()
        yield pending
        if self._options.counter_latencies:
            yield from duration_families.values()
        if any(family.samples for family in cache_families.values()):
            yield from cache_families.values()
        if self._options.histogram_latencies:
            yield histogram
            if intervals.samples:
                yield intervals
                yield response_counts
        if self._options.summary_latencies:
            yield from summaries.values()
        yield batch_sizes
        yield dispatch
        if unhealthy.samples:
            yield unhealthy
            yield timeouts


def _cache_families(stats: CacheStatistics) -> Iterator[Metric]:
    """Triton's server-wide cache gauges (its local cache reports these per interval)."""
    utilization = stats.used_bytes / stats.capacity_bytes if stats.capacity_bytes else 0.0
    for name, documentation, value in (
        ("nv_cache_num_entries", "Number of responses stored in response cache", stats.entries),
        ("nv_cache_num_lookups", "Number of cache lookups in response cache", stats.lookups),
        ("nv_cache_num_hits", "Number of cache hits in response cache", stats.hits),
        ("nv_cache_num_misses", "Number of cache misses in response cache", stats.misses),
        ("nv_cache_num_evictions", "Number of cache evictions in response cache", stats.evictions),
        ("nv_cache_util", "Cache utilization [0.0 - 1.0]", utilization),
        (
            "nv_cache_lookup_duration",
            "Total cache lookup duration (hit and miss), in microseconds",
            stats.lookup_ns // 1000,
        ),
        (
            "nv_cache_insertion_duration",
            "Total cache insertion duration, in microseconds",
            stats.insert_ns // 1000,
        ),
    ):
        family = _family(name, documentation, "gauge")
        family.add_sample(name, {}, value)
        yield family


def _add_summary(
    family: Metric,
    labels: dict[str, str],
    summary: Summary,
    quantiles: tuple[tuple[float, float], ...],
) -> None:
    name = family.name
    values = summary.quantiles([quantile for quantile, _ in quantiles])
    for (quantile, _), value in zip(quantiles, values, strict=True):
        family.add_sample(name, {**labels, "quantile": repr(quantile)}, value)
    family.add_sample(f"{name}_sum", labels, summary.sum)
    family.add_sample(f"{name}_count", labels, summary.count)


def _in_name_order(labels: dict[str, str], **more: str) -> dict[str, str]:
    """``labels`` and ``more`` in the order of their names, as Triton writes a series'
    labels (clients that match its lines, such as Triton's QA, depend on it); ``le`` and
    ``quantile`` are added after these, last, as there."""
    return dict(sorted({**labels, **more}.items()))


def _micros(duration: Duration) -> int:
    return duration.ns // 1000


def _add_histogram(family: Metric, labels: dict[str, str], histogram: Histogram) -> None:
    name = family.name
    for bound, count in histogram.cumulative():
        family.add_sample(f"{name}_bucket", {**labels, "le": bound}, count)
    family.add_sample(f"{name}_count", labels, sum(histogram.counts))
    family.add_sample(f"{name}_sum", labels, histogram.sum)


def _add_batch_sizes(family: Metric, labels: dict[str, str], sizes: dict[int, int]) -> None:
    if not sizes:
        return
    total = 0
    bounds = sorted({1, 2, 4, 8, 16, 32, 64, 128, 256, *sizes})
    for bound in bounds:
        total = sum(count for size, count in sizes.items() if size <= bound)
        family.add_sample("nv_inference_batch_size_bucket", {**labels, "le": f"{bound}.0"}, total)
    family.add_sample("nv_inference_batch_size_bucket", {**labels, "le": "+Inf"}, total)
    weighted = sum(size * count for size, count in sizes.items())
    family.add_sample("nv_inference_batch_size_count", labels, total)
    family.add_sample("nv_inference_batch_size_sum", labels, weighted)


class _CpuSampler:
    """nv_cpu_utilization and memory from /proc, sampled at most once per interval (Triton's
    ``--metrics-interval-ms``): scrapes within an interval see the same values, and the
    utilisation covers the time since the sample before."""

    def __init__(self, interval_s: float = 2.0) -> None:
        self._interval = interval_s
        self._last = self._read_stat()
        self._sampled_at: float | None = None
        self._families: list[Metric] = []

    @staticmethod
    def _read_stat() -> tuple[int, int] | None:
        try:
            with open("/proc/stat") as handle:
                fields = [int(v) for v in handle.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        return sum(fields), idle

    def families(self) -> Iterator[Metric]:
        now = time.monotonic()
        if self._sampled_at is None or now - self._sampled_at >= self._interval:
            self._families = list(self._sample())
            self._sampled_at = now
        yield from self._families

    def _sample(self) -> Iterator[Metric]:
        current = self._read_stat()
        utilization = 0.0
        if current and self._last:
            total, idle = current[0] - self._last[0], current[1] - self._last[1]
            utilization = (total - idle) / total if total > 0 else 0.0
        self._last = current or self._last
        cpu = _family("nv_cpu_utilization", "CPU utilization rate [0.0 - 1.0]", "gauge")
        cpu.add_sample("nv_cpu_utilization", {}, utilization)
        yield cpu
        memory = _meminfo()
        if memory:
            total_bytes, available = memory
            family = _family(
                "nv_cpu_memory_total_bytes", "CPU total memory (RAM), in bytes", "gauge"
            )
            family.add_sample("nv_cpu_memory_total_bytes", {}, total_bytes)
            yield family
            family = _family("nv_cpu_memory_used_bytes", "CPU used memory (RAM), in bytes", "gauge")
            family.add_sample("nv_cpu_memory_used_bytes", {}, total_bytes - available)
            yield family


def _meminfo() -> tuple[int, int] | None:
    values = {}
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                key, _, rest = line.partition(":")
                values[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    if "MemTotal" not in values:
        return None
    return values["MemTotal"], values.get("MemAvailable", values.get("MemFree", 0))


def _pinned_memory_families(pool_bytes: int) -> Iterator[Metric]:
    """Triton's pinned pool gauges, as its build reports them without a GPU: the pool's
    configured size, and nothing used (no transfer to a GPU goes through a pinned pool here)."""
    for what, value in (("total", pool_bytes), ("used", 0)):
        name = f"nv_pinned_memory_pool_{what}_bytes"
        family = _family(name, f"Pinned memory pool {what} memory size, in bytes", "gauge")
        family.add_sample(name, {}, value)
        yield family


def _cuda_host_copy_families() -> Iterator[Metric]:
    """Copies between CUDA shared memory and host memory, where CUDA regions can be opened:
    they stay 0 while every CUDA-region tensor goes to an instance that takes device memory."""
    if not cuda_support().available:
        return
    for suffix, what, value in (
        ("", "Number of copies", HOST_COPIES.count),
        ("_bytes", "Bytes copied", HOST_COPIES.byte_size),
    ):
        name = f"triton_core_cuda_shared_memory_host_copies{suffix}"
        family = _family(name, f"{what} between CUDA shared memory and host memory", "counter")
        family.add_sample(name, {}, value)
        yield family


def create_registry(server: Server, options: MetricsOptions) -> CollectorRegistry:
    """A registry of this server's own, holding the Triton collector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TritonCollector(server, options))
    if options.allow_gpu_metrics:
        from triton_core.observability.gpu_metrics import GpuCollector

        gpu = GpuCollector.create()
        if gpu is not None:
            registry.register(gpu)
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    """Prometheus text format with Triton's exact names (no ``_total`` added to counters)
    and labels in Triton's order (model, version, then the rest)."""
    lines = []
    for family in registry.collect():
        if not family.samples:
            continue
        documentation = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
        lines.append(f"# HELP {family.name} {documentation}")
        lines.append(f"# TYPE {family.name} {family.type}")
        for sample in family.samples:
            labels = ",".join(f'{key}="{_escape(value)}"' for key, value in sample.labels.items())
            value = sample.value
            text = str(int(value)) if float(value).is_integer() else repr(float(value))
            lines.append(f"{sample.name}{{{labels}}} {text}" if labels else f"{sample.name} {text}")
    return ("\n".join(lines) + "\n").encode()


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace('"', r"\"").replace("\n", r"\n")


def create_metrics_app(registry: CollectorRegistry) -> falcon.asgi.App:
    """The ``/metrics`` ASGI app (GET only), as Triton's metrics listener."""
    import falcon
    import falcon.asgi

    class MetricsResource:
        async def on_get(self, req: falcon.asgi.Request, resp: falcon.asgi.Response) -> None:
            resp.content_type = CONTENT_TYPE
            resp.data = exposition(registry)

    app = falcon.asgi.App()
    app.add_route("/metrics", MetricsResource())
    return app
