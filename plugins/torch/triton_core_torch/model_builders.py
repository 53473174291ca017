"""Small PyTorch models for tests, examples and benchmarks, and a function to save them.

Build a module (with :func:`seeded` to draw its weights from a fixed seed), then write it
with :func:`save`, whose ``fmt`` picks the file format:

* ``"script"``: ``torch.jit.script`` then ``torch.jit.save`` (``model.pt``);
* ``"trace"``: ``torch.jit.trace`` with an example batch, then ``torch.jit.save``;
* ``"export"``: ``torch.export.export`` with a dynamic batch dim, then ``torch.export.save``
  (``model.pt2``).

The modules take positional arguments (``x``, ``y``); configs bind to them by those names or
by ``INPUT__<i>``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

PathLike = str | os.PathLike[str]

__all__ = [
    "AddSub",
    "BatchProbe",
    "ConvNet",
    "DictOutputs",
    "Identity",
    "Mixed",
    "Mlp",
    "Raising",
    "Strings",
    "save",
    "seeded",
]


class Mlp(nn.Module):
    """``Linear -> ReLU -> Linear``: ``[batch, in_features] -> [batch, out_features]``."""

    def __init__(self, in_features: int = 64, hidden: int = 256, out_features: int = 10) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.fc2 = nn.Linear(hidden, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


class ConvNet(nn.Module):
    """A small CNN: ``[batch, 3, size, size]`` images -> ``[batch, classes]`` logits.

    Three 3x3 conv + ReLU blocks (``width``, 2x and 4x ``width`` channels, the last two with
    stride 2), global average pooling and a linear classifier. Per 64x64 image: ``width=16``
    24k parameters, 22 MFLOP; ``width=32`` 94k, 83 MFLOP; ``width=64`` 373k, 316 MFLOP.
    """

    def __init__(self, classes: int = 10, width: int = 16) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, padding=1)
        self.conv2 = nn.Conv2d(width, 2 * width, 3, stride=2, padding=1)
        self.conv3 = nn.Conv2d(2 * width, 4 * width, 3, stride=2, padding=1)
        self.fc = nn.Linear(4 * width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        x = torch.relu(self.conv3(x))
        return self.fc(x.mean(dim=(2, 3)))


class AddSub(nn.Module):
    """Triton's "simple" model: ``(x + y, x - y)`` as a tuple."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x + y, x - y


class Identity(nn.Module):
    """Returns its input (any datatype, any shape)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class DictOutputs(nn.Module):
    """``{"sum": x.sum(1, keepdim=True), "scaled": 2 * x}``: outputs bound by name."""

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"sum": x.sum(dim=1, keepdim=True), "scaled": x * 2}


class Mixed(nn.Module):
    """Two inputs of different datatypes: ``x (FP32) * y (INT64)`` as FP32."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * y.to(torch.float32)


class Raising(nn.Module):
    """Raises inside ``forward`` when any input value is negative, else returns ``x + 1``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool((x < 0).any()):
            raise RuntimeError("negative input rejected by the model")
        return x + 1


class Strings(nn.Module):
    """A ``List[str]`` in, a ``List[str]`` out (upper-cased): TorchScript only."""

    def forward(self, text: list[str]) -> list[str]:
        return [item.upper() for item in text]


class BatchProbe(nn.Module):
    """Wraps a model and adds an output: the batch size of the forward call, per row.

    Benchmarks serve it to see which batch sizes dynamic batching forms.
    """

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        size = torch.full((x.shape[0], 1), x.shape[0], dtype=torch.int32)
        return self.inner(x), size


def save(
    module: nn.Module,
    path: PathLike,
    fmt: str = "script",
    example: tuple[Any, ...] | None = None,
    *,
    dynamic_batch: bool = True,
) -> Path:
    """Write ``module`` as TorchScript (``script``/``trace``) or a torch.export program.

    ``example`` (positional forward arguments) is needed to trace or export; ``export``
    marks dim 0 of every tensor argument as a dynamic batch dim unless ``dynamic_batch`` is
    false.
    """
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    module = module.eval()
    if fmt == "script":
        torch.jit.save(torch.jit.script(module), os.fspath(out))
    elif fmt == "trace":
        if example is None:
            raise ValueError("tracing needs an example input")
        with torch.no_grad():
            traced = torch.jit.trace(module, example, strict=False)
        torch.jit.save(traced, os.fspath(out))
    elif fmt == "export":
        if example is None:
            raise ValueError("exporting needs an example input")
        dynamic_shapes = None
        if dynamic_batch:
            batch = torch.export.Dim("batch", min=1, max=1 << 16)
            dynamic_shapes = tuple(
                {0: batch} if isinstance(arg, torch.Tensor) and arg.ndim else None
                for arg in example
            )
        program = torch.export.export(module, example, dynamic_shapes=dynamic_shapes)
        torch.export.save(program, os.fspath(out))
    else:
        raise ValueError(f"unknown format {fmt!r}: expected script, trace or export")
    return out


def seeded(factory: type[nn.Module], seed: int = 0, **kwargs: Any) -> nn.Module:
    """``factory(**kwargs)`` with weights drawn from ``torch.manual_seed(seed)``."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return factory(**kwargs)
