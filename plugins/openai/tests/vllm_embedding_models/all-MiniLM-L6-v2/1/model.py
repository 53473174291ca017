"""``mock_models/mock_vllm`` under the name of Triton's embedding test model (vLLM's
all-MiniLM-L6-v2): the same mock, loaded from its file."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_SOURCE = Path(__file__).resolve().parents[3] / "mock_models" / "mock_vllm" / "1" / "model.py"
_spec = importlib.util.spec_from_file_location("mock_vllm_model", _SOURCE)
assert _spec is not None and _spec.loader is not None
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)

TritonPythonModel = _module.TritonPythonModel
