"""Batching strategy ``max_input_bytes``: a batch holds at most N bytes of inputs.

Registered through the ``triton_core`` entry point of this distribution; a model selects it
with the config parameter ``batch_strategy`` and sets the limit with ``max_batch_input_bytes``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from triton_core import BatchStrategy, hookimpl, invalid_arg

if TYPE_CHECKING:
    from triton_core import BatchStrategyRegistry, InferenceRequest, ModelConfig

NAME = "max_input_bytes"
LIMIT_PARAMETER = "max_batch_input_bytes"


class MaxInputBytes(BatchStrategy):
    """Requests join while the batch's input bytes stay within the model's limit."""

    def __init__(self, config: ModelConfig) -> None:
        parameters = config.parameters
        raw = parameters[LIMIT_PARAMETER].string_value if LIMIT_PARAMETER in parameters else ""
        try:
            self.limit = int(raw)
        except ValueError:
            self.limit = 0
        if self.limit <= 0:
            raise invalid_arg(
                f"model '{config.name}': batch strategy '{NAME}' needs parameter "
                f"'{LIMIT_PARAMETER}' set to a positive number of bytes (got '{raw}')"
            )

    def new_batch(self) -> list[int]:
        return [0]  # bytes in the batch so far (a list, so include can update it)

    def include(self, request: InferenceRequest, state: list[int]) -> bool:
        size = sum(tensor.data.nbytes for tensor in request.inputs.values())
        if state[0] and state[0] + size > self.limit:
            return False  # the first request always joins, however large
        state[0] += size
        return True


@hookimpl
def triton_register_batch_strategies(registry: BatchStrategyRegistry) -> None:
    registry.add(NAME, MaxInputBytes)
