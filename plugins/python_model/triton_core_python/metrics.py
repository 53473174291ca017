"""The server's side of ``pb_utils.MetricFamily`` / ``Metric``: handles into the server's
custom metrics registry (``Server.custom_metrics``), per stub process.

A stub names families and metrics by handles this module hands out; every call is checked
here (a stub is model code: bounded, and it only reaches its own handles). What a model's
instances hold together is bounded by :class:`ModelMetricBudget`; when a stub ends, its
handles are released and series no instance holds any more leave ``/metrics``.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

from triton_core import internal, invalid_arg, unavailable

#: handles (families plus metrics) the instances of one model may hold at once
DEFAULT_MAX_HANDLES = 4096


class ModelMetricBudget:
    """How many metric handles the instances of one model hold (shared by its stubs)."""

    def __init__(self, model_name: str, limit: int = DEFAULT_MAX_HANDLES) -> None:
        self.model_name = model_name
        self.limit = limit
        self._held = 0
        self._lock = threading.Lock()

    def take(self) -> None:
        with self._lock:
            if self._held >= self.limit:
                raise unavailable(
                    f"model '{self.model_name}' holds {self.limit} metric families and "
                    "metrics already (--backend-config=python,metrics-per-model=N raises it)"
                )
            self._held += 1

    def give_back(self, count: int = 1) -> None:
        with self._lock:
            self._held = max(0, self._held - count)


class StubMetrics:
    """The metric handles of one stub process."""

    def __init__(self, registry: Any, budget: ModelMetricBudget) -> None:
        self._registry = registry
        self._budget = budget
        self._ids = itertools.count(1)
        #: handle -> (family, metric or None for a family handle)
        self._handles: dict[int, tuple[Any, Any]] = {}

    def call(self, operation: str, args: Any) -> Any:
        """``family``, ``metric`` (a new handle) or ``value``; raises TritonError."""
        registry = self._registry
        if registry is None:
            raise unavailable("custom metrics need a running server")
        if operation == "family":
            name, description, kind = _fields(args, (str, str, int))
            family = self._counted(lambda: registry.family(name, description, kind))
            return self._add(family, None)
        if operation == "metric":
            family_id, labels, buckets = _fields(args, (int, dict, (list, type(None))))
            family, metric = self._handle(family_id)
            if metric is not None:
                raise invalid_arg(f"metric handle {family_id} is not a metric family")
            created = self._counted(lambda: registry.metric(family, labels, buckets))
            return self._add(family, created)
        if operation == "value":
            (metric_id,) = _fields(args, (int,))
            return self._metric(metric_id).value()
        raise invalid_arg(f"unknown custom metrics call '{operation}'")

    def update(self, operation: str, args: Any) -> None:
        """``increment``, ``set``, ``observe`` or ``release``; raises TritonError."""
        ident, value = _fields(args, (int, float))
        if operation == "release":
            self._release(ident)
            return
        metric = self._metric(ident)
        if operation == "increment":
            metric.increment(value)
        elif operation == "set":
            metric.set(value)
        elif operation == "observe":
            metric.observe(value)
        else:
            raise invalid_arg(f"unknown custom metrics update '{operation}'")

    def release_all(self) -> None:
        """The stub ended: metrics first, then their families."""
        handles = sorted(self._handles.items(), key=lambda item: item[1][1] is None)
        for ident, _ in handles:
            self._release(ident)

    def _counted(self, create: Callable[[], Any]) -> Any:
        """``create()`` within the model's budget."""
        self._budget.take()
        try:
            return create()
        except BaseException:
            self._budget.give_back()
            raise

    def _add(self, family: Any, metric: Any) -> int:
        ident = next(self._ids)
        self._handles[ident] = (family, metric)
        return ident

    def _handle(self, ident: int) -> tuple[Any, Any]:
        try:
            return self._handles[ident]
        except KeyError:
            raise internal(f"metric handle {ident} does not exist (it was deleted)") from None

    def _metric(self, ident: int) -> Any:
        _, metric = self._handle(ident)
        if metric is None:
            raise invalid_arg(f"metric handle {ident} is a metric family, not a metric")
        return metric

    def _release(self, ident: int) -> None:
        entry = self._handles.pop(ident, None)
        if entry is None:
            return
        family, metric = entry
        if metric is None:
            self._registry.release_family(family)
        else:
            self._registry.release_metric(family, metric)
        self._budget.give_back()


def _fields(args: Any, types: tuple[Any, ...]) -> tuple[Any, ...]:
    """``args`` checked against ``types`` (a stub's message is model code: trust nothing)."""
    if not isinstance(args, tuple | list) or len(args) != len(types):
        raise invalid_arg("malformed custom metrics call")
    for value, expected in zip(args, types, strict=True):
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            continue
        if not isinstance(value, expected) or isinstance(value, bool):
            raise invalid_arg("malformed custom metrics call")
    return tuple(args)
