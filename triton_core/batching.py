"""Removed from the public API: use ``triton_core.BatchPlan``. Kept for one release.

``execute_concatenated(requests, model_name=..., all_outputs=..., output_datatypes=...,
output_names=..., run=..., run_alone=...)`` is now
``BatchPlan(model_name, output_datatypes, batching=True).execute(requests, run)``: the plan
selects each request's outputs (``output_names``) and runs the requests that cannot be
concatenated on their own (``run_alone``) itself. Importing this module warns.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import numpy as np

from triton_core.backends.framework.execution import BatchPlan
from triton_core.types import InferenceRequest, InferenceResponse

warnings.warn(
    "triton_core.batching is deprecated and goes away in the next release: use "
    "triton_core.BatchPlan(model_name, output_datatypes, batching=True).execute(requests, run)",
    DeprecationWarning,
    stacklevel=2,
)

RunBatch = Callable[[dict[str, np.ndarray], list[str]], Sequence[np.ndarray]]


def execute_concatenated(
    requests: list[InferenceRequest],
    *,
    model_name: str,
    all_outputs: list[str],
    output_datatypes: dict[str, str],
    output_names: Callable[[InferenceRequest], list[str]] | None = None,
    run: RunBatch,
    run_alone: Callable[[InferenceRequest], InferenceResponse] | None = None,
) -> list[InferenceResponse]:
    """The batch run once through :class:`~triton_core.BatchPlan` (``all_outputs``,
    ``output_names`` and ``run_alone`` are what the plan does itself)."""
    outputs = {name: output_datatypes[name] for name in all_outputs}
    return BatchPlan(model_name, outputs, batching=True).execute(requests, run)
