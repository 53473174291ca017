"""The PyTorch backend: TorchScript (``model.pt``) and ``torch.export`` (``model.pt2``) models.

Behaviour follows Triton's PyTorch backend (triton-inference-server/pytorch_backend): the same
backend and platform names, the same input/output naming conventions and the same config
``parameters``. ``torch.export`` programs are a format of their own here: they record their
inputs' and outputs' datatypes and shapes, so their configs are auto-completed like ONNX ones.

This module does not import torch: :mod:`triton_core_torch.loading` and
:mod:`triton_core_torch.runtime` are imported when the first PyTorch model is completed or
loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Final

from triton_core import Backend, ModelContext, Status, TritonError

if TYPE_CHECKING:
    from triton_core import ModelConfig
    from triton_core_torch.runtime import PyTorchModel

PLATFORM: Final = "pytorch_libtorch"


class PyTorchBackend(Backend):
    """Serves TorchScript and ``torch.export`` models with PyTorch, on CPUs or CUDA devices."""

    name = "pytorch"
    platforms = (PLATFORM,)
    default_model_filename = "model.pt"
    # Triton gives PyTorch models 1 instance per CPU group: PyTorch parallelises inside an op.
    default_cpu_instance_count = 1

    def runs_on_gpus(self) -> bool:
        """Only where this torch build sees CUDA devices (not a CPU build)."""
        import torch

        return bool(torch.cuda.is_available())

    def auto_complete_config(self, config: ModelConfig, model_path: Path) -> None:
        """Fill ``platform``; complete a ``torch.export`` program's config from its signature.

        Inputs are named after forward's arguments, outputs after the keys of a returned dict
        or ``OUTPUT__<i>``; dynamic dims become -1, and a dynamic first dim on every tensor
        makes the model batchable (max_batch_size from ``default-max-batch-size``, plus
        ``dynamic_batching {}``). TorchScript files record no datatypes or shapes, so, as in
        Triton, their configs are not completed: a config without inputs or outputs fails
        with a message that shows the model's forward signature.
        """
        from triton_core_torch import loading
        from triton_core_torch.signature import complete_config

        model = config.name or model_path.parent.parent.name
        if not config.platform:
            # As Triton does for backend "pytorch" (metadata reports the platform).
            config.platform = PLATFORM
        path = loading.resolve_model_file(model_path, model)
        if path != model_path:
            # model.pt2 found beside the missing default model.pt: load that file.
            config.default_model_filename = path.name
        if loading.is_exported_program(path):
            signature = loading.read_signature(path, model)
            complete_config(config, signature, model, self)
            return
        if not config.input or not config.output:
            signature = loading.read_signature(path, model)
            raise TritonError(
                Status.INVALID_ARG,
                f"model '{model}': a TorchScript model does not record the datatypes and "
                f"shapes of its inputs and outputs, so its config must list 'input' and "
                f"'output' (the model's {signature.forward_text()}; name inputs after the "
                f"forward arguments or INPUT__<i>, outputs OUTPUT__<i>), or export it with "
                f"torch.export as model.pt2 to have the config completed",
            )

    def load_model(self, context: ModelContext) -> PyTorchModel:
        """Parse the settings and find the file; modules are loaded per instance."""
        from triton_core_torch.runtime import PyTorchModel

        return PyTorchModel(context, self.default_cpu_instance_count)
