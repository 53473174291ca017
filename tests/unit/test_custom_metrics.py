"""The server's custom metrics registry (what pb_utils.MetricFamily reaches)."""

from __future__ import annotations

import pytest

from triton_core.errors import Status, TritonError
from triton_core.observability.custom_metrics import (
    COUNTER,
    GAUGE,
    HISTOGRAM,
    MAX_LABELS,
    CustomMetrics,
)


def samples(registry: CustomMetrics) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    return {
        family.name: [(s.name, s.labels, s.value) for s in family.samples]
        for family in registry.collect()
    }


def test_families_are_shared_by_name_and_metrics_by_labels():
    registry = CustomMetrics()
    first = registry.family("requests", "Requests", COUNTER)
    second = registry.family("requests", "Requests", COUNTER)
    assert first is second
    a = registry.metric(first, {"model": "m"}, None)
    b = registry.metric(second, {"model": "m"}, None)
    assert a is b
    a.increment(2)
    b.increment(3)
    assert samples(registry) == {"requests": [("requests", {"model": "m"}, 5.0)]}


def test_labels_are_written_in_name_order_as_tritons():
    registry = CustomMetrics()
    family = registry.family("ordered", "", COUNTER)
    registry.metric(family, {"zeta": "1", "alpha": "2", "mid": "3"}, None).increment(1)
    (_, labels, _), *_ = samples(registry)["ordered"]
    assert list(labels) == ["alpha", "mid", "zeta"]


def test_a_series_leaves_when_its_last_owner_releases_it():
    registry = CustomMetrics()
    family = registry.family("g", "", GAUGE)
    metric = registry.metric(family, {}, None)
    registry.metric(family, {}, None)
    registry.release_metric(family, metric)
    assert "g" in samples(registry)
    registry.release_metric(family, metric)
    assert samples(registry) == {}
    registry.release_family(family)
    assert registry.family("g", "", COUNTER).kind == COUNTER  # the name is free again


def test_histograms_count_into_their_buckets():
    registry = CustomMetrics()
    family = registry.family("latency", "", HISTOGRAM)
    metric = registry.metric(family, {"s": "x"}, [1, 2.5])
    for value in (0.5, 1, 2, 7):
        metric.observe(value)
    assert samples(registry)["latency"] == [
        ("latency_count", {"s": "x"}, 4),
        ("latency_sum", {"s": "x"}, 10.5),
        ("latency_bucket", {"s": "x", "le": "1"}, 2),
        ("latency_bucket", {"s": "x", "le": "2.5"}, 3),
        ("latency_bucket", {"s": "x", "le": "+Inf"}, 4),
    ]


@pytest.mark.parametrize(
    ("name", "kind", "labels", "buckets", "message"),
    [
        ("bad-name", COUNTER, {}, None, "Invalid metric name 'bad-name'"),
        ("nv_inference_count", COUNTER, {}, None, "reserved"),
        ("x", 9, {}, None, "unknown metric kind"),
        ("x", COUNTER, {"__x": "1"}, None, "invalid label name '__x'"),
        ("x", COUNTER, {f"l{i}": "" for i in range(MAX_LABELS + 1)}, None, "more than"),
        ("x", COUNTER, {"a": "v" * 5000}, None, "at most 1024 characters"),
        ("x", COUNTER, {}, [1.0], "Unexpected buckets found."),
        ("x", HISTOGRAM, {}, None, "Missing required buckets."),
        ("x", HISTOGRAM, {}, [2.0, 1.0], "increasing"),
        ("x", HISTOGRAM, {}, ["a"], "must be numbers"),
        ("x", HISTOGRAM, {}, list(range(1000)), "more than 128 buckets"),
    ],
)
def test_what_a_model_cannot_create(name, kind, labels, buckets, message):
    registry = CustomMetrics()
    with pytest.raises(TritonError) as info:
        family = registry.family(name, "", kind)
        registry.metric(family, labels, buckets)
    assert info.value.status is Status.INVALID_ARG and message in info.value.message


def test_operations_a_kind_does_not_support_are_tritons_errors():
    registry = CustomMetrics()
    counter = registry.metric(registry.family("c", "", COUNTER), {}, None)
    histogram = registry.metric(registry.family("h", "", HISTOGRAM), {}, [1.0])
    with pytest.raises(TritonError, match="can only be incremented monotonically"):
        counter.increment(-1)
    with pytest.raises(TritonError, match="COUNTER does not support Set"):
        counter.set(1)
    with pytest.raises(TritonError, match="HISTOGRAM does not support Value"):
        histogram.value()
    with pytest.raises(TritonError, match="already exists with kind COUNTER"):
        registry.family("c", "", GAUGE)
