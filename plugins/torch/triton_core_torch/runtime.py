"""The torch side of the backend: a loaded model version, which creates its instances.

Loading files and reading signatures live in :mod:`triton_core_torch.loading`, execution in
:mod:`triton_core_torch.instance`.

Imported by :mod:`triton_core_torch.backend` only when the first PyTorch model is completed
or loaded, so that a server without PyTorch models never imports torch.

Execution follows Triton's PyTorch backend: inputs are wrapped as tensors without a copy
(``torch.from_numpy``), a batch of requests runs as one ``forward`` under
``torch.inference_mode()``, outputs come back as numpy views of the output tensors and are
split per request without a copy.
"""

from __future__ import annotations

import copy
import logging
import threading
from typing import Any

import torch

from triton_core import (
    BackendModel,
    BatchPlan,
    DataType,
    InstanceSpec,
    ModelContext,
    RaggedBatching,
    Status,
    TritonError,
    count_instances,
    output_reshapes,
    wire_types,
)
from triton_core_torch.instance import PyTorchInstance
from triton_core_torch.loading import (
    CONFIG_TO_TORCH,
    EXPORT_LOCK,
    CheckedOnce,
    Loaded,
    apply_process_settings,
    exported_signature,
    is_exported_program,
    load_error,
    load_exported,
    load_torchscript,
    move_program,
    resolve_model_file,
    torchscript_signature,
)
from triton_core_torch.settings import parse_settings
from triton_core_torch.signature import (
    Binding,
    check_config,
)

logger = logging.getLogger(__name__)

# -- the model ------------------------------------------------------------------------------------


class PyTorchModel(BackendModel):
    """One loaded version of a PyTorch model; everything request-independent is done here."""

    def __init__(self, context: ModelContext, default_cpu_instance_count: int = 1) -> None:
        config = context.config
        self.name = context.name
        self.config = config
        self.model_file = resolve_model_file(context.model_path, self.name)
        self.exported = is_exported_program(self.model_file)
        self.max_batch_size = config.max_batch_size
        self.instance_count = count_instances(config, default_cpu_instance_count)
        self.settings = parse_settings(
            config, self.name, exported=self.exported, instances=self.instance_count
        )
        apply_process_settings(self.settings, self.name, self.exported)

        self.output_datatypes = wire_types(self.name, "output", config.output)
        self.input_datatypes = wire_types(self.name, "input", config.input)
        ragged = RaggedBatching.of(config)
        if ragged is not None:
            self.input_datatypes.update(ragged.target_types)
        self.output_dtypes: dict[str, torch.dtype | None] = {
            t.name: CONFIG_TO_TORCH.get(DataType.Name(t.data_type)) for t in config.output
        }
        self.output_reshapes = output_reshapes(config)
        self.plan = BatchPlan(
            self.name, self.output_datatypes, batching=self.max_batch_size > 0, ragged=ragged
        )
        self.binding: Binding | None = None
        self._shared: dict[str, Loaded] = {}
        self._lock = threading.Lock()
        self._program: Any = None

    def device_for(self, spec: InstanceSpec) -> torch.device | None:
        """``cuda:<id>`` for GPU instances, the CPU for CPU ones, None (as saved) for MODEL."""
        kind = spec.kind.upper()
        if kind == "CPU":
            return torch.device("cpu")
        if kind == "MODEL":
            return None
        if not torch.cuda.is_available():
            raise TritonError(
                Status.INVALID_ARG,
                f"unable to load model '{self.name}' instance '{spec.name}' (KIND_GPU, device "
                f"{spec.device_id}): this torch {torch.__version__} "
                + ("is a CPU-only build" if torch.version.cuda is None else "sees no CUDA device")
                + "; install a CUDA build of torch or use KIND_CPU",
            )
        if spec.device_id >= torch.cuda.device_count():
            raise TritonError(
                Status.INVALID_ARG,
                f"unable to load model '{self.name}' instance '{spec.name}': GPU "
                f"{spec.device_id} does not exist (torch sees {torch.cuda.device_count()})",
            )
        return torch.device("cuda", spec.device_id)

    def load(self, device: torch.device | None) -> Loaded:
        """Load the file for ``device`` (shared between instances with weight sharing)."""
        key = str(device)
        with self._lock:
            if self.settings.weight_sharing and key in self._shared:
                return self._shared[key]
            loaded = self._load(device)
            if self.settings.weight_sharing:
                self._shared[key] = loaded
            return loaded

    def _load(self, device: torch.device | None) -> Loaded:
        if not self.exported:
            # As Triton's backend: TorchScript weights are loaded as inference tensors.
            with torch.inference_mode(self.settings.inference_mode):
                module = load_torchscript(self.model_file, self.name, device)
            return Loaded(module.forward, torchscript_signature(module, self.name), module)
        with EXPORT_LOCK:
            if self._program is None:
                self._program = load_exported(self.model_file, self.name)
            program = self._program
            signature = exported_signature(program, self.name)
            if device is not None and device.type != "cpu":
                # the move rewrites the program it is given: the CPU instances' stays as it is
                program = move_program(copy.deepcopy(program), device, self.name)
            try:
                module = program.module()
            except Exception as exc:
                raise load_error(self.model_file, self.name, exc) from exc
        return Loaded(CheckedOnce(module, program), signature, module)

    def create_instance(self, spec: InstanceSpec) -> PyTorchInstance:
        """Load the module for the instance's device; the first load is checked."""
        device = self.device_for(spec)
        loaded = self.load(device)
        if self.binding is None:
            self.binding = check_config(self.config, loaded.signature, self.name, complete=True)
            logger.info(
                "model '%s': %s %s, inputs bound by %s",
                self.name,
                loaded.signature.format,
                loaded.signature.forward_text(),
                self.binding.convention,
            )
        return PyTorchInstance(self, loaded, device, spec)

    def finalize(self) -> None:
        """Drop the shared modules and the program."""
        self._shared.clear()
        self._program = None
