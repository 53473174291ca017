"""Sum what the workers count: model statistics and Prometheus expositions.

Each worker counts only the requests it served; the server's answer is the sum over
workers. Statistics travel between workers as plain JSON (never pickled) and are added
into fresh :class:`ModelStatistics` objects, so the frontends encode them as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from triton_core.observability.statistics import (
    BatchStatistics,
    Duration,
    Histogram,
    ModelStatistics,
)

#: the Duration attributes of ModelStatistics, in Triton's order
_DURATIONS: Final = (
    "success",
    "fail",
    "queue",
    "compute_input",
    "compute_infer",
    "compute_output",
    "cache_hit",
    "cache_miss",
)
_BATCH_DURATIONS: Final = ("compute_input", "compute_infer", "compute_output")
#: counters keyed by a name (or a batch size) that are summed key by key
_TALLIES: Final = ("failures", "dispatch_reasons", "batch_size_histogram")
#: histograms summed bucket by bucket (present where latency histograms are on)
_HISTOGRAMS: Final = ("request_latency_ms", "response_interval_ms", "responses_per_request")


def statistics_to_json(stats: ModelStatistics) -> dict[str, Any]:
    """One model version's counters as JSON values (batch sizes as string keys)."""
    data: dict[str, Any] = {
        "name": stats.name,
        "version": stats.version,
        "last_inference_ms": stats.last_inference_ms,
        "inference_count": stats.inference_count,
        "execution_count": stats.execution_count,
    }
    for key in _DURATIONS:
        duration = getattr(stats, key)
        data[key] = [duration.count, duration.ns]
    data["batches"] = {
        str(size): [[getattr(batch, key).count, getattr(batch, key).ns] for key in _BATCH_DURATIONS]
        for size, batch in list(stats.batches.items())
    }
    for key in _TALLIES:
        data[key] = {str(name): count for name, count in list(getattr(stats, key).items())}
    for key in _HISTOGRAMS:
        histogram = getattr(stats, key)
        if histogram is not None:
            data[key] = {
                "bounds": list(histogram.bounds),
                "counts": list(histogram.counts),
                "sum": histogram.sum,
            }
    return data


def _add_duration(duration: Duration, pair: Any) -> None:
    count, ns = pair
    duration.add(int(ns), int(count))


def add_statistics(target: ModelStatistics, data: dict[str, Any]) -> None:
    """Add one worker's counters (:func:`statistics_to_json`) into ``target``."""
    target.last_inference_ms = max(target.last_inference_ms, int(data["last_inference_ms"]))
    target.inference_count += int(data["inference_count"])
    target.execution_count += int(data["execution_count"])
    for key in _DURATIONS:
        _add_duration(getattr(target, key), data[key])
    for size_text, pairs in data["batches"].items():
        size = int(size_text)
        batch = target.batches.get(size)
        if batch is None:
            batch = target.batches[size] = BatchStatistics()
        for key, pair in zip(_BATCH_DURATIONS, pairs, strict=True):
            _add_duration(getattr(batch, key), pair)
    for key in _TALLIES:
        tally = getattr(target, key)
        integer_keys = key == "batch_size_histogram"
        for name, count in data[key].items():
            name = int(name) if integer_keys else name
            tally[name] = tally.get(name, 0) + int(count)
    for key in _HISTOGRAMS:
        observed = data.get(key)
        if observed is not None:
            _add_histogram(target, key, observed)


def _add_histogram(target: ModelStatistics, key: str, observed: dict[str, Any]) -> None:
    histogram = getattr(target, key)
    if histogram is None:
        histogram = Histogram(observed["bounds"])
        setattr(target, key, histogram)
    if list(histogram.bounds) != [float(bound) for bound in observed["bounds"]]:
        return  # workers run one configuration; a mismatch cannot be summed
    for index, count in enumerate(observed["counts"]):
        histogram.counts[index] += int(count)
    histogram.sum += float(observed["sum"])


def sum_statistics(
    local: list[ModelStatistics], others: Iterable[list[dict[str, Any]]]
) -> list[ModelStatistics]:
    """This worker's statistics plus every other worker's, per model name and version; the
    local order first, then versions only other workers have."""
    merged: dict[tuple[str, int], ModelStatistics] = {}
    for stats in local:
        total = ModelStatistics(stats.name, stats.version)
        add_statistics(total, statistics_to_json(stats))
        merged[(stats.name, stats.version)] = total
    for worker in others:
        for data in worker:
            key = (str(data["name"]), int(data["version"]))
            if key not in merged:
                merged[key] = ModelStatistics(*key)
            add_statistics(merged[key], data)
    return list(merged.values())


# -- Prometheus text ---------------------------------------------------------------------------

#: host- and device-wide families: every worker sees the same machine, so one worker's value
#: is the server's (summing would count the host N times)
_HOST_PREFIXES: Final = ("nv_cpu_", "nv_gpu_", "nv_energy_")
#: fractions of one worker's capacity: the mean over workers, not the sum
_MEAN_FAMILIES: Final = frozenset({"nv_cache_util"})


def _family_of(sample_name: str, families: dict[str, list[str]]) -> str:
    for suffix in ("_bucket", "_count", "_sum"):
        if sample_name.endswith(suffix) and sample_name[: -len(suffix)] in families:
            return sample_name[: -len(suffix)]
    return sample_name


class _Exposition:
    """Families in first-seen order; each keeps its HELP/TYPE lines and its samples' values
    by series (sample name and labels, as written)."""

    def __init__(self) -> None:
        self.headers: dict[str, list[str]] = {}
        self.values: dict[str, dict[str, float]] = {}
        self.workers: dict[str, int] = {}

    def add(self, text: str, *, local: bool) -> None:
        seen: set[str] = set()
        for line in text.splitlines():
            if not line:
                continue
            if line.startswith("#"):
                parts = line.split(" ", 3)
                if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                    self.headers.setdefault(parts[2], [])
                    if line not in self.headers[parts[2]]:
                        self.headers[parts[2]].append(line)
                continue
            series, _, value_text = line.rpartition(" ")
            name = series.split("{", 1)[0]
            family = _family_of(name, self.headers)
            if family.startswith(_HOST_PREFIXES) and not local:
                continue
            self.headers.setdefault(family, [])
            values = self.values.setdefault(family, {})
            values[series] = values.get(series, 0.0) + float(value_text)
            if family not in seen:
                seen.add(family)
                self.workers[family] = self.workers.get(family, 0) + 1

    def text(self) -> str:
        lines = []
        for family, header in self.headers.items():
            values = self.values.get(family)
            if not values:
                continue
            lines += header
            divisor = self.workers[family] if family in _MEAN_FAMILIES else 1
            for series, value in values.items():
                value /= divisor
                number = str(int(value)) if value.is_integer() else repr(value)
                lines.append(f"{series} {number}")
        return "\n".join(lines) + "\n"


def sum_expositions(local: bytes, others: Iterable[bytes]) -> bytes:
    """The Prometheus text of the whole server: every series summed over workers (names,
    labels and order as each worker writes them); host-wide families from this worker."""
    exposition = _Exposition()
    exposition.add(local.decode(), local=True)
    for text in others:
        exposition.add(text.decode(), local=False)
    return exposition.text().encode()
