"""For backends: run several requests as one framework call and split the outputs back.

The requests of a batch are concatenated along the batch dimension, run once, and each
request gets views of its rows of every output it asked for (no copies). Requests asking for
outputs the model lacks fail alone; requests that cannot be concatenated run one at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from triton_core.errors import Status, TritonError
from triton_core.types import InferenceRequest, InferenceResponse, Tensor

#: ``run(inputs, output_names)`` -> one array per name, batch dimension first
RunBatch = Callable[[dict[str, np.ndarray], list[str]], Sequence[np.ndarray]]


def execute_concatenated(
    requests: list[InferenceRequest],
    *,
    model_name: str,
    all_outputs: list[str],
    output_datatypes: dict[str, str],
    output_names: Callable[[InferenceRequest], list[str]],
    run: RunBatch,
    run_alone: Callable[[InferenceRequest], InferenceResponse],
) -> list[InferenceResponse]:
    """One ``run`` for the whole batch; ``output_names(request)`` returns ``all_outputs``
    itself when the request wants every output, and raises TritonError for unknown ones."""
    responses: list[InferenceResponse | None] = [None] * len(requests)
    wanted: list[list[str]] = []
    batch: list[int] = []
    union: set[str] = set()
    every_output = False
    for i, request in enumerate(requests):
        try:
            names = output_names(request)
        except TritonError as exc:
            responses[i] = InferenceResponse(error=exc)
            continue
        if names is all_outputs:
            every_output = True
        else:
            union.update(names)
        wanted.append(names)
        batch.append(i)
    if not batch:
        return responses  # type: ignore[return-value]
    members = [requests[i] for i in batch]
    first = members[0].inputs
    input_names = list(first)
    if not input_names or any(r.inputs.keys() != first.keys() for r in members):
        # Without a common set of inputs there is nothing to concatenate.
        for i in batch:
            responses[i] = run_alone(requests[i])
        return responses  # type: ignore[return-value]
    sizes = [r.inputs[input_names[0]].data.shape[0] for r in members]
    try:
        inputs = {
            name: np.concatenate([r.inputs[name].data for r in members], axis=0)
            for name in input_names
        }
    except ValueError:
        # Different non-batch dims: the batcher should not have combined them; run alone.
        for i in batch:
            responses[i] = run_alone(requests[i])
        return responses  # type: ignore[return-value]
    names = all_outputs if every_output else [n for n in all_outputs if n in union]
    total = sum(sizes)
    results: dict[str, np.ndarray] = {}
    for name, array in zip(names, run(inputs, names), strict=True):
        if array.ndim == 0 or array.shape[0] != total:
            raise TritonError(
                Status.INTERNAL,
                f"model '{model_name}' returned output '{name}' with shape "
                f"{list(array.shape)} for a batch of {total}",
            )
        results[name] = array
    start = 0
    for i, names_i, size in zip(batch, wanted, sizes, strict=True):
        stop = start + size
        # Basic slices are views: no copy per request.
        responses[i] = InferenceResponse(
            outputs=[Tensor(n, output_datatypes[n], results[n][start:stop]) for n in names_i]
        )
        start = stop
    return responses  # type: ignore[return-value]
