"""``--metrics-config``, ``--allow-cpu-metrics`` and ``--metrics-interval-ms`` as options: what
the metrics frontend and the collector are built with (apart from the collector, so that the
frontends' options name it without depending on the server)."""

from __future__ import annotations

from dataclasses import dataclass

from triton_core.observability.statistics import DEFAULT_SUMMARY_QUANTILES

__all__ = ["MetricsOptions"]


@dataclass(slots=True)
class MetricsOptions:
    """``--metrics-config`` settings, ``--allow-cpu-metrics`` and ``--metrics-interval-ms``."""

    counter_latencies: bool = True
    histogram_latencies: bool = False
    summary_latencies: bool = False
    #: ``summary_quantiles``: (quantile, allowed error) pairs
    summary_quantiles: tuple[tuple[float, float], ...] = DEFAULT_SUMMARY_QUANTILES
    allow_cpu_metrics: bool = True
    #: ``--allow-gpu-metrics``: NVML's GPU families (see triton_core.observability.gpu_metrics)
    allow_gpu_metrics: bool = True
    #: how often the sampled gauges (CPU utilisation and memory) refresh, in milliseconds
    interval_ms: float = 2000.0
    #: ``--pinned-memory-pool-byte-size``: the pool size nv_pinned_memory_pool_total_bytes
    #: reports (Triton's default, 256 MiB)
    pinned_memory_pool_bytes: int = 1 << 28

    @classmethod
    def parse(
        cls, settings: list[str], allow_cpu_metrics: bool = True, interval_ms: float = 2000.0
    ) -> MetricsOptions:
        """From ``key=value`` strings; raises ValueError naming an unknown key or bad value."""
        options = cls(allow_cpu_metrics=allow_cpu_metrics, interval_ms=interval_ms)
        for setting in settings:
            key, sep, value = setting.partition("=")
            if sep and key == "summary_quantiles":
                options.summary_quantiles = _quantiles(value)
                continue
            if not sep or key not in _BOOL_SETTINGS:
                raise ValueError(
                    f"--metrics-config: unknown setting '{setting}' (known: counter_latencies="
                    "<bool>, histogram_latencies=<bool>, summary_latencies=<bool>, "
                    "summary_quantiles=<quantile>:<error>,...)"
                )
            if value.lower() not in ("true", "false", "1", "0"):
                raise ValueError(f"--metrics-config: {key} must be true or false, got '{value}'")
            setattr(options, key, value.lower() in ("true", "1"))
        return options


_BOOL_SETTINGS = ("counter_latencies", "histogram_latencies", "summary_latencies")
#: a bound on the quantiles one summary reports
_MAX_QUANTILES = 32


def _quantiles(text: str) -> tuple[tuple[float, float], ...]:
    """``<quantile>:<error>,...`` as Triton's summary_quantiles; each within [0, 1]."""
    pairs = []
    for item in text.strip('"').split(","):
        quantile, sep, error = item.strip().partition(":")
        try:
            pair = (float(quantile), float(error))
        except ValueError:
            pair = (-1.0, -1.0)
        if not sep or not all(0.0 <= value <= 1.0 for value in pair):
            raise ValueError(
                f"--metrics-config: summary_quantiles expects <quantile>:<error>,... with "
                f"values within [0, 1], got '{item}'"
            )
        pairs.append(pair)
    if not 0 < len(pairs) <= _MAX_QUANTILES:
        raise ValueError(f"--metrics-config: summary_quantiles takes 1 to {_MAX_QUANTILES} pairs")
    return tuple(sorted(pairs))
