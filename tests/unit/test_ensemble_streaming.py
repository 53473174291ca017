"""Ensembles with decoupled steps, in-process: branches, their order, nesting and the final flag."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np

from triton_core import (
    Backend,
    BackendModel,
    InferenceRequest,
    InferenceResponse,
    ModelInstance,
    Tensor,
    hookimpl,
)
from triton_core.plugins.manager import create_plugin_manager
from triton_core.server.core import Server, ServerOptions


class _Count(ModelInstance):
    """Decoupled: for INPUT0 [n], n responses OUTPUT0 [0] ... [n-1] from a thread."""

    def execute(self, requests: list[InferenceRequest]) -> list[InferenceResponse]:
        for request in requests:
            count = int(request.inputs["INPUT0"].data.reshape(-1)[0])
            threading.Thread(target=self._answer, args=(request, count)).start()
        return [InferenceResponse() for _ in requests]

    @staticmethod
    def _answer(request: InferenceRequest, count: int) -> None:
        sender = request.response_sender
        assert sender is not None
        for index in range(count):
            value = np.array([index], dtype=np.int32)
            sender.send(InferenceResponse([Tensor("OUTPUT0", "INT32", value)]))
        sender.send(final=True)


class _Late(ModelInstance):
    """OUTPUT0 = 10 * INPUT0, after (5 - INPUT0) * 60 ms: later values finish first."""

    def execute(self, requests: list[InferenceRequest]) -> list[InferenceResponse]:
        responses = []
        for request in requests:
            data = request.inputs["INPUT0"].data
            time.sleep(max(0, 5 - int(data.reshape(-1)[0])) * 0.06)
            responses.append(InferenceResponse([Tensor("OUTPUT0", "INT32", data * 10)]))
        return responses


class _Model(BackendModel):
    def __init__(self, instance: type[ModelInstance]) -> None:
        self.instance = instance

    def create_instance(self, spec):  # type: ignore[no-untyped-def]
        return self.instance()


class _CountBackend(Backend):
    name = "count"
    default_model_filename = "model.bin"

    def load_model(self, context):  # type: ignore[no-untyped-def]
        return _Model(_Count)


class _LateBackend(_CountBackend):
    name = "late"

    def load_model(self, context):  # type: ignore[no-untyped-def]
        return _Model(_Late)


class _Plugin:
    @hookimpl
    def triton_register_backends(self, registry) -> None:  # type: ignore[no-untyped-def]
        registry.add(_CountBackend)
        registry.add(_LateBackend)


TENSORS = (
    'input [{ name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] }]\n'
    'output [{ name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] }]\n'
)


def write_model(repo: Path, name: str, backend: str, extra: str = "") -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.bin").write_bytes(b"")
    (repo / name / "config.pbtxt").write_text(
        f'backend: "{backend}"\nmax_batch_size: 0\n{TENSORS}{extra}\n'
    )


def write_chain(repo: Path, name: str, models: list[str]) -> None:
    """An ensemble IN -> models[0] -> ... -> OUT; a model named ``e:<name>`` is an ensemble
    (tensors IN and OUT), any other has INPUT0 and OUTPUT0."""
    tensors = ["IN", *(f"t{i}" for i in range(1, len(models))), "OUT"]
    steps = []
    for i, model in enumerate(models):
        ensemble = model.startswith("e:")
        source, target = ("IN", "OUT") if ensemble else ("INPUT0", "OUTPUT0")
        steps.append(
            f'step [{{ model_name: "{model.removeprefix("e:")}" model_version: -1 '
            f'input_map {{ key: "{source}" value: "{tensors[i]}" }} '
            f'output_map {{ key: "{target}" value: "{tensors[i + 1]}" }} }}]'
        )
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(
        'platform: "ensemble"\nmax_batch_size: 0\n'
        'input [{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }]\n'
        'output [{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }]\n'
        f"ensemble_scheduling {{ {' '.join(steps)} }}\n"
    )


def streaming_server(repo: Path) -> Server:
    write_model(repo, "count", "count", "model_transaction_policy { decoupled: true }")
    write_model(repo, "late", "late", "instance_group [{ count: 5 kind: KIND_CPU }]")
    plugins = create_plugin_manager(autoload=False, extra_plugins=[("streaming", _Plugin())])
    return Server(ServerOptions([repo]), plugins)


async def stream(server: Server, model: str, value: int) -> list[InferenceResponse]:
    request = InferenceRequest(
        model, {"IN": Tensor("IN", "INT32", np.array([value], dtype=np.int32))}, id="r"
    )
    return [response async for response in server.infer_stream(request)]


def values(responses: list[InferenceResponse]) -> list[int]:
    return [int(r.output("OUT").data[0]) for r in responses if r.outputs]


async def test_branches_answer_in_the_order_the_decoupled_step_sent_them(tmp_path):
    repo = tmp_path / "models"
    write_chain(repo, "ordered", ["count", "late"])
    async with streaming_server(repo) as server:
        assert server.model_is_decoupled("ordered")
        responses = await stream(server, "ordered", 5)
        # the later tokens' post-processing finished first; the client still sees them in order
        assert values(responses) == [0, 10, 20, 30, 40]
        assert [r.final for r in responses] == [False] * 5 + [True]
        assert responses[-1].outputs == [] and all(r.id == "r" for r in responses)
        assert server.model("ordered").statistics.success.count == 1
        assert values(await stream(server, "ordered", 0)) == []  # no token: the final flag only


async def test_a_decoupled_step_after_a_decoupled_step_streams_every_branch(tmp_path):
    repo = tmp_path / "models"
    write_chain(repo, "twice", ["count", "count"])
    write_chain(repo, "outer", ["e:twice", "late"])  # a decoupled ensemble as a step
    async with streaming_server(repo) as server:
        # count(3) sends 0, 1, 2; then count(0) sends nothing, count(1) 0, count(2) 0 and 1
        # (the second step's runs answer from their own threads: any order among them)
        assert sorted(values(await stream(server, "twice", 3))) == [0, 0, 1]
        assert server.model_is_decoupled("outer")
        assert sorted(values(await stream(server, "outer", 3))) == [0, 0, 10]
