"""The model file: a linear layer as JSON, and what it says about its tensors."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from triton_core import invalid_arg


@dataclass(frozen=True)
class Reported:
    """One tensor as the model file describes it (a ``triton_core.ReportedTensor``)."""

    name: str
    config_type: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class LinearLayer:
    """``{"input": "x", "output": "y", "weight": [[...], ...], "bias": [...]}``: any number
    of rows of ``x`` (batch first) to as many rows of ``y``."""

    input: str
    output: str
    weight: np.ndarray  # (features in, features out), float32
    bias: np.ndarray  # (features out,), float32

    @classmethod
    def read(cls, path: Path, model: str) -> LinearLayer:
        """Read ``path``; INVALID_ARG naming the model and the file when it is malformed."""
        try:
            spec = json.loads(path.read_text())
            weight = np.asarray(spec["weight"], dtype=np.float32)
            bias = np.asarray(spec.get("bias", np.zeros(weight.shape[-1])), dtype=np.float32)
            layer = cls(str(spec["input"]), str(spec["output"]), weight, bias)
        except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
            raise invalid_arg(f"model '{model}': cannot read {path.name}: {exc!r}") from exc
        if weight.ndim != 2 or bias.shape != (weight.shape[1],):
            raise invalid_arg(
                f"model '{model}': {path.name} has weight shape {list(weight.shape)} and bias "
                f"shape {list(bias.shape)}; expected [in, out] and [out]"
            )
        return layer

    def to_json(self) -> str:
        """The text of this layer's model file."""
        return json.dumps(
            {
                "input": self.input,
                "output": self.output,
                "weight": self.weight.tolist(),
                "bias": self.bias.tolist(),
            }
        )

    def inputs(self) -> dict[str, Reported]:
        return {self.input: Reported(self.input, "TYPE_FP32", (-1, self.weight.shape[0]))}

    def outputs(self) -> dict[str, Reported]:
        return {self.output: Reported(self.output, "TYPE_FP32", (-1, self.weight.shape[1]))}

    def tensors(self, kind: str) -> dict[str, Reported]:
        """The model's ``"input"`` or ``"output"`` tensors by name."""
        return self.inputs() if kind == "input" else self.outputs()

    def __call__(self, x: np.ndarray) -> np.ndarray:
        y: np.ndarray = x @ self.weight + self.bias
        return y
