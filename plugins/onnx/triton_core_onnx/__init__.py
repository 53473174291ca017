"""ONNX Runtime backend for triton-core.

Serves ONNX models (backend ``onnxruntime``, platform ``onnxruntime_onnx``, file
``model.onnx``) with one ``onnxruntime.InferenceSession`` per model instance. The plugin is
found through the ``triton_core`` entry-point group; see :mod:`triton_core_onnx.backend`.
"""

from __future__ import annotations

__version__ = "0.1.0"
