"""TensorRT backend for triton-core.

Serves serialized TensorRT engines (backend ``tensorrt``, platform ``tensorrt_plan``, file
``model.plan``) on CUDA GPUs; see :mod:`triton_core_tensorrt.backend`. Everything decided
without a device lives in :mod:`triton_core_tensorrt.planning`, on an engine's
:class:`~triton_core_tensorrt.description.EngineDescription`.
"""

from __future__ import annotations

__version__ = "0.1.0"
