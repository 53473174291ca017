"""PyTorch backend for triton-core.

Serves TorchScript (``model.pt``) and ``torch.export`` (``model.pt2``) models (backend
``pytorch``, platform ``pytorch_libtorch``) with one module per model instance, on the CPU or
on a CUDA device. The plugin is found through the ``triton_core`` entry-point group; see
:mod:`triton_core_torch.backend`. ``torch`` itself is imported only when the first PyTorch
model loads, so a server without PyTorch models does not pay for it.
"""

from __future__ import annotations

__version__ = "0.1.0"
