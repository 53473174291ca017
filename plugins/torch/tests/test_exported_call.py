"""torch.export programs: checked once per input shapes, then called through their own graph."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from triton_core_torch import model_builders as mb
from triton_core_torch.loading import CheckedOnce, lifted_graph


class WithConstants(nn.Module):
    """A non-persistent buffer and a tensor constant: both live in the program's constants."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("offset", torch.tensor([1.0, 2.0, 3.0]), persistent=False)
        self.scale = torch.tensor([2.0, 2.0, 2.0])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale + self.offset


class Counter(nn.Module):
    """Counts its calls in a buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.add_(1)
        return x + self.calls


def exported(tmp_path: Path, module: nn.Module, *example: torch.Tensor) -> Any:
    """Save ``module`` as a .pt2 (dynamic batch) and load it back, as the plugin does."""
    path = tmp_path / "model.pt2"
    mb.save(module, path, "export", example)
    return torch.export.load(str(path))


def same(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, tuple | list):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    return isinstance(b, torch.Tensor) and torch.equal(a, b)


@pytest.mark.parametrize(
    ("module", "inputs"),
    [
        (mb.seeded(mb.Mlp, in_features=4, out_features=2), 1),  # a tensor
        (mb.AddSub(), 2),  # a tuple
        (mb.DictOutputs(), 1),  # a dict
        (WithConstants(), 1),  # constants and a non-persistent buffer
    ],
    ids=["tensor", "tuple", "dict", "constants"],
)
def test_shapes_seen_before_run_the_programs_graph_with_the_modules_results(
    tmp_path: Path, module: nn.Module, inputs: int
) -> None:
    width = 3 if isinstance(module, WithConstants) else 4
    program = exported(tmp_path, module, *[torch.zeros(2, width)] * inputs)
    assert lifted_graph(program) is not None
    reference = program.module()
    call = CheckedOnce(program.module(), program)
    args = [torch.rand(3, width) for _ in range(inputs)]
    first = call(*args)  # through the module, with its checks
    again = call(*args)  # through the program's graph
    with torch.inference_mode():
        inferred = call(*args)
    expected = reference(*args)
    assert same(first, expected) and same(again, expected) and same(inferred, expected)


@pytest.mark.parametrize("functional", [False, True], ids=["in-place", "returned"])
def test_a_program_that_writes_a_buffer_sees_its_writes(tmp_path: Path, functional: bool) -> None:
    # The graph writes the buffer in place (the graph's and the module's buffer are one
    # tensor) or, once functionalized, returns the new value for module() to write back.
    program = exported(tmp_path, Counter(), torch.zeros(2, 1))
    if functional:
        program = program.run_decompositions()
        assert lifted_graph(program) is None
    module = program.module()
    call = CheckedOnce(module, program)
    x = torch.zeros(2, 1)
    results = [call(x)[0, 0].item() for _ in range(3)]
    assert results == [1.0, 2.0, 3.0]  # each call saw the previous call's write
    assert module.calls.item() == 3.0


def test_new_shapes_are_checked_again(tmp_path: Path) -> None:
    mlp = mb.seeded(mb.Mlp, in_features=4, out_features=2)
    program = exported(tmp_path, mlp, torch.zeros(2, 4))
    call = CheckedOnce(program.module(), program)
    call(torch.rand(2, 4))
    call(torch.rand(2, 4))
    with pytest.raises(Exception, match=r"Guard failed|Expected input"):
        call(torch.rand(2, 5))  # a width the program was not exported for
    with pytest.raises(Exception, match=r"Guard failed|Expected input"):
        call(torch.rand(2, 5))  # refused shapes are not remembered
    with pytest.raises(Exception, match=r"Expected input|dtype"):
        call(torch.rand(2, 4, dtype=torch.float64))  # nor a seen shape with another dtype
    assert call(torch.rand(3, 4)).shape == (3, 2)


def test_a_program_moved_to_a_device_runs_its_graph_with_the_moved_weights(
    tmp_path: Path,
) -> None:
    # GPU instances move the program with move_to_device_pass; the CPU stands in for the
    # device here, which exercises the same pass and the same lifted graph.
    from torch.export.passes import move_to_device_pass

    program = exported(
        tmp_path, mb.seeded(mb.Mlp, in_features=4, out_features=2), torch.zeros(2, 4)
    )
    moved = move_to_device_pass(program, torch.device("cpu"))
    lifted = lifted_graph(moved)
    assert lifted is not None
    x = torch.rand(3, 4)
    assert torch.equal(lifted(x), program.module()(x))
