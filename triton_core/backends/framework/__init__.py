"""The framework-backend kit: what a backend around a framework (ONNX Runtime, PyTorch,
TensorRT) needs beyond the framework itself, written once.

* :mod:`.config` - auto-complete a config from what the framework reports about a model's
  tensors, check a config against it (Triton's messages), wire types, instance counting;
* :mod:`.parameters` - boolean and integer settings from ``parameters`` and
  ``--backend-config``;
* :mod:`.execution` - a per-model :class:`~.execution.BatchPlan` that selects the requested
  outputs and runs a batch of requests as one framework call, and config ``reshape``.

Plugins import these names from ``triton_core``, never from this package.
"""
