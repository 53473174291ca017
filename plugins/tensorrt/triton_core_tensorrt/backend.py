"""The TensorRT backend: serialized engines (``model.plan``) on GPUs.

Behaviour follows Triton's TensorRT backend (triton-inference-server/tensorrt_backend): the
same backend and platform names, auto-complete from the engine, optimization profiles chosen
by instance group, and one execution context and CUDA stream per instance.

This module imports neither tensorrt nor a CUDA library: :mod:`triton_core_tensorrt.runtime`
is imported when the first plan is completed or loaded, so the plugin lists and imports on a
machine without them, where a plan model fails to load saying what is missing.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Final

from triton_core import Backend, ModelContext

if TYPE_CHECKING:
    from triton_core import ModelConfig
    from triton_core_tensorrt.runtime import TensorRTModel

PLATFORM: Final = "tensorrt_plan"


class TensorRTBackend(Backend):
    """Serves TensorRT engines; every instance runs on a GPU."""

    name = "tensorrt"
    platforms = (PLATFORM,)
    default_model_filename = "model.plan"

    def auto_complete_config(self, config: ModelConfig, model_path: Path) -> None:
        """Fill inputs, outputs, max_batch_size and dynamic batching from the engine,
        deserialized on the first GPU of the config (GPU 0 when it lists none)."""
        from triton_core_tensorrt import runtime
        from triton_core_tensorrt.planning import auto_complete

        model = config.name or model_path.parent.parent.name
        if not config.platform:
            config.platform = PLATFORM
        device = next((g for group in config.instance_group for g in group.gpus), 0)
        description = runtime.read_description(model, model_path, device)
        auto_complete(config, description, model)

    def load_model(self, context: ModelContext) -> TensorRTModel:
        from triton_core_tensorrt.runtime import TensorRTModel

        return TensorRTModel(context)
