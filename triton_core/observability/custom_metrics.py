"""Metric families that models create while they run, exported on ``/metrics``.

The equivalent of Triton's custom metrics C API (``TRITONSERVER_MetricFamilyNew``,
``TRITONSERVER_MetricNew``, ``TRITONSERVER_MetricIncrement`` ...), which the Python
backend's ``pb_utils.MetricFamily`` reaches. A family is shared by name and a metric by
its labels, as in Prometheus registries: two instances of a model that create the same
family and labels update one series. Each handle is reference counted; a series leaves
``/metrics`` when its last owner releases it (the model is unloaded).
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Iterator, Sequence
from typing import Final

from prometheus_client.metrics_core import Metric

from triton_core.errors import internal, invalid_arg, unsupported

COUNTER: Final = 0
GAUGE: Final = 1
HISTOGRAM: Final = 2
_KIND_NAMES: Final = ("COUNTER", "GAUGE", "HISTOGRAM")
_PROMETHEUS_TYPES: Final = ("counter", "gauge", "histogram")

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
#: the server's own families start with these; a model may not shadow them (other nv_
#: names are allowed, as in Triton)
_RESERVED_PREFIXES: Final = (
    "nv_inference_", "nv_cache_", "nv_gpu_", "nv_cpu_", "nv_energy_", "nv_pinned_memory_",
    "nv_model_",
)  # fmt: skip

#: bounds on what one family or metric may hold (a model cannot make /metrics unbounded)
MAX_NAME_LENGTH: Final = 256
MAX_DESCRIPTION_LENGTH: Final = 4096
MAX_LABELS: Final = 32
MAX_LABEL_VALUE_LENGTH: Final = 1024
MAX_BUCKETS: Final = 128


def _kind_name(kind: int) -> str:
    return f"TRITONSERVER_METRIC_KIND_{_KIND_NAMES[kind]}"


class CustomMetric:
    """One series (a family's metric with given labels)."""

    __slots__ = ("_buckets", "_counts", "_family", "_lock", "_sum", "_value", "labels", "refs")

    def __init__(
        self, family: CustomFamily, labels: dict[str, str], buckets: tuple[float, ...] | None
    ) -> None:
        self._family = family
        self.labels = labels
        self._buckets = buckets
        self._counts = [0] * (len(buckets) + 1) if buckets is not None else []
        self._sum = 0.0
        self._value = 0.0
        self._lock = threading.Lock()
        self.refs = 0

    @property
    def kind(self) -> int:
        return self._family.kind

    def increment(self, value: float) -> None:
        kind = self.kind
        if kind == HISTOGRAM:
            raise unsupported(f"{_kind_name(kind)} does not support Increment")
        if kind == COUNTER and value < 0.0:
            raise invalid_arg(
                f"{_kind_name(kind)} can only be incremented monotonically by non-negative values."
            )
        with self._lock:
            self._value += value

    def set(self, value: float) -> None:
        if self.kind != GAUGE:
            raise unsupported(f"{_kind_name(self.kind)} does not support Set")
        self._value = float(value)

    def observe(self, value: float) -> None:
        if self.kind != HISTOGRAM:
            raise unsupported(f"{_kind_name(self.kind)} does not support Observe")
        assert self._buckets is not None
        index = len(self._buckets)
        for position, bound in enumerate(self._buckets):
            if value <= bound:
                index = position
                break
        with self._lock:
            self._counts[index] += 1
            self._sum += value

    def value(self) -> float:
        if self.kind == HISTOGRAM:
            raise unsupported(f"{_kind_name(self.kind)} does not support Value")
        return self._value

    def add_samples(self, metric: Metric, name: str) -> None:
        if self._buckets is None:
            metric.add_sample(name, self.labels, self._value)
            return
        with self._lock:
            counts, total = list(self._counts), self._sum
        # Triton's order: count, sum, then the buckets
        metric.add_sample(f"{name}_count", self.labels, sum(counts))
        metric.add_sample(f"{name}_sum", self.labels, total)
        cumulative = 0
        for bound, count in zip((*self._buckets, math.inf), counts, strict=True):
            cumulative += count
            metric.add_sample(f"{name}_bucket", {**self.labels, "le": _bound(bound)}, cumulative)


class CustomFamily:
    """A named family of one kind; its metrics are keyed by their labels."""

    def __init__(self, name: str, description: str, kind: int) -> None:
        self.name = name
        self.description = description
        self.kind = kind
        self.metrics: dict[tuple[tuple[str, str], ...], CustomMetric] = {}
        self.refs = 0


class CustomMetrics:
    """The server's registry of custom metric families (thread-safe)."""

    def __init__(self) -> None:
        self._families: dict[str, CustomFamily] = {}
        self._lock = threading.Lock()

    def family(self, name: str, description: str, kind: int) -> CustomFamily:
        """The family ``name`` (created, or shared when it exists with the same kind)."""
        _check_name(name)
        if kind not in (COUNTER, GAUGE, HISTOGRAM):
            raise invalid_arg(f"unknown metric kind {kind} of metric family '{name}'")
        if len(description) > MAX_DESCRIPTION_LENGTH:
            raise invalid_arg(
                f"the description of metric family '{name}' is longer than "
                f"{MAX_DESCRIPTION_LENGTH} characters"
            )
        with self._lock:
            family = self._families.get(name)
            if family is None:
                family = self._families[name] = CustomFamily(name, description, kind)
            elif family.kind != kind:
                raise invalid_arg(
                    f"metric family '{name}' already exists with kind "
                    f"{_KIND_NAMES[family.kind]}, not {_KIND_NAMES[kind]}"
                )
            family.refs += 1
            return family

    def metric(
        self,
        family: CustomFamily,
        labels: dict[str, str],
        buckets: Sequence[float] | None,
    ) -> CustomMetric:
        """The metric of ``family`` with ``labels`` (created, or shared)."""
        checked = _check_labels(family.name, labels)
        bounds = _check_buckets(family, buckets)
        key = tuple(sorted(checked.items()))
        with self._lock:
            if self._families.get(family.name) is not family:
                raise internal(f"metric family '{family.name}' has been deleted")
            metric = family.metrics.get(key)
            if metric is None:
                # labels in name order, as Triton writes them
                metric = family.metrics[key] = CustomMetric(family, dict(key), bounds)
            metric.refs += 1
            return metric

    def release_metric(self, family: CustomFamily, metric: CustomMetric) -> None:
        with self._lock:
            metric.refs -= 1
            if metric.refs <= 0:
                key = tuple(sorted(metric.labels.items()))
                if family.metrics.get(key) is metric:
                    del family.metrics[key]

    def release_family(self, family: CustomFamily) -> None:
        with self._lock:
            family.refs -= 1
            if family.refs <= 0 and self._families.get(family.name) is family:
                del self._families[family.name]

    def collect(self) -> Iterator[Metric]:
        """The families with at least one metric, as Prometheus families."""
        with self._lock:
            families = [(f, list(f.metrics.values())) for f in self._families.values()]
        for family, metrics in families:
            if not metrics:
                continue
            metric = Metric(family.name, family.description, _PROMETHEUS_TYPES[family.kind])
            metric.name = family.name  # no "_total" added to counters, as in Triton
            for series in metrics:
                series.add_samples(metric, family.name)
            yield metric


def _check_name(name: str) -> None:
    if not isinstance(name, str) or not _NAME.match(name) or len(name) > MAX_NAME_LENGTH:
        raise invalid_arg(
            f"Invalid metric name '{str(name)[:MAX_NAME_LENGTH]}': a name matches "
            f"[a-zA-Z_:][a-zA-Z0-9_:]* and has at most {MAX_NAME_LENGTH} characters"
        )
    if name.startswith(_RESERVED_PREFIXES):
        raise invalid_arg(
            f"Invalid metric name '{name}': names starting with {', '.join(_RESERVED_PREFIXES)} "
            "are reserved for the server's own metrics"
        )


def _check_labels(family: str, labels: dict[str, str]) -> dict[str, str]:
    if len(labels) > MAX_LABELS:
        raise invalid_arg(f"a metric of family '{family}' has more than {MAX_LABELS} labels")
    checked: dict[str, str] = {}
    for key, value in labels.items():
        if not isinstance(key, str) or not _LABEL.match(key) or key.startswith("__"):
            raise invalid_arg(
                f"invalid label name '{str(key)[:64]}' of a metric of family '{family}': a "
                "label name matches [a-zA-Z_][a-zA-Z0-9_]* and does not start with '__'"
            )
        if not isinstance(value, str) or len(value) > MAX_LABEL_VALUE_LENGTH:
            raise invalid_arg(
                f"label '{key}' of a metric of family '{family}' must be a string of at most "
                f"{MAX_LABEL_VALUE_LENGTH} characters"
            )
        checked[key] = value
    return checked


def _check_buckets(
    family: CustomFamily, buckets: Sequence[float] | None
) -> tuple[float, ...] | None:
    if family.kind != HISTOGRAM:
        if buckets is not None:
            raise invalid_arg("Unexpected buckets found.")
        return None
    if buckets is None:
        raise invalid_arg("Missing required buckets.")
    if len(buckets) > MAX_BUCKETS:
        raise invalid_arg(
            f"a histogram of family '{family.name}' has more than {MAX_BUCKETS} buckets"
        )
    try:
        bounds = tuple(float(bound) for bound in buckets)
    except (TypeError, ValueError):
        raise invalid_arg(
            f"the buckets of a histogram of family '{family.name}' must be numbers"
        ) from None
    if any(math.isnan(b) for b in bounds) or list(bounds) != sorted(set(bounds)):
        raise invalid_arg(
            f"the buckets of a histogram of family '{family.name}' must be increasing numbers"
        )
    return bounds


def _bound(bound: float) -> str:
    if math.isinf(bound):
        return "+Inf"
    return str(int(bound)) if bound.is_integer() else repr(bound)
