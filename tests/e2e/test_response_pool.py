"""``--grpc-max-response-pool-size``: a decoupled model is held back by a gRPC client that reads
slowly, as Triton's response queue holds it back.

The client here is a raw HTTP/2 connection that grants flow-control window only for the bytes
it has read (HTTP/2's 65,535 at first), so what the server may have sent ahead is known
exactly. Each response is 256 KiB, more than that window: when the client has read R
responses and waits, the server's writer has begun writing response R+1 (its room in the
pool is free: Triton frees it when it hands it to gRPC) and cannot finish it, and N more
wait in the pool. So a model held back has had exactly R + N + 1 sends return; while the
client is inside a response it may be one more.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import struct
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.plugins.stream_backend import pattern, read_progress
from tests.support import ServerProcess, stays_true_async, wait_until_async
from tests.unit.test_grpc_http2 import RawClient, message
from triton_core.frontends.grpc import frames as h2
from triton_core.protos import grpc_service_pb2 as pb

PLUGINS = {"TRITON_CORE_PLUGINS": "tests.plugins.stream_backend"}
STREAM_PATH = "/inference.GRPCInferenceService/ModelStreamInfer"
#: the flag's value in these tests
POOL = 4
#: responses per request and the bytes of each (each more than HTTP/2's default window)
COUNT = 40
OUT_BYTES = 256 * 1024
#: how long a held model is watched to show it stays held
HELD_SECS = 0.5
MODELS = ("pooled_python", "pooled_threaded")

PYTHON_MODEL = """
import json
import os
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils


def pattern(index, size):
    return ((np.arange(size, dtype=np.uint32) * 7 + index) % 251).astype(np.uint8)


def progress(folder, name, text):
    partial = Path(folder, "." + name + ".partial")
    partial.write_text(text)
    os.replace(partial, Path(folder, name))


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"])["parameters"]
        self.size = int(parameters["out_bytes"]["string_value"])
        self.folder = parameters["progress_dir"]["string_value"]

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            name = request.request_id()
            ended = "finished"
            for index in range(count):
                if sender.is_cancelled():
                    ended = "cancelled"
                    break
                sender.send(pb_utils.InferenceResponse([
                    pb_utils.Tensor("OUT", pattern(index, self.size))
                ]))
                progress(self.folder, name + ".sent", str(index + 1))
            progress(self.folder, name + ".ended", ended)
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


def write_models(repo: Path, progress_dir: Path) -> None:
    """The same decoupled model twice: a Python model and the threaded stream backend's."""
    common = f"""max_batch_size: 0
model_transaction_policy {{ decoupled: true }}
input [ {{ name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_UINT8 dims: [ -1 ] }} ]
parameters {{ key: "out_bytes" value {{ string_value: "{OUT_BYTES}" }} }}
parameters {{ key: "progress_dir" value {{ string_value: "{progress_dir}" }} }}
"""
    python = repo / "pooled_python"
    (python / "1").mkdir(parents=True)
    (python / "1" / "model.py").write_text(PYTHON_MODEL)
    (python / "config.pbtxt").write_text('backend: "python"\n' + common)
    threaded = repo / "pooled_threaded"
    (threaded / "1").mkdir(parents=True)
    (threaded / "1" / "model.stream").write_bytes(b"")
    no_delay = 'parameters { key: "delay_ms" value { string_value: "0" } }\n'
    (threaded / "config.pbtxt").write_text('backend: "stream"\n' + common + no_delay)
    ensemble = repo / "pooled_ensemble"
    (ensemble / "1").mkdir(parents=True)
    (ensemble / "config.pbtxt").write_text(
        """platform: "ensemble"
max_batch_size: 0
input [ { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_UINT8 dims: [ -1 ] } ]
ensemble_scheduling { step [ { model_name: "pooled_threaded" model_version: -1
  input_map { key: "COUNT" value: "COUNT" } output_map { key: "OUT" value: "OUT" } } ] }
"""
    )


@pytest.fixture(scope="module")
def progress_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pool_progress")


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory, progress_dir: Path) -> Path:
    repo = tmp_path_factory.mktemp("pool_models")
    write_models(repo, progress_dir)
    return repo


def _serve(repo: Path, *args: str) -> Iterator[ServerProcess]:
    process = ServerProcess([repo], *args, env=PLUGINS)
    try:
        process.wait_ready()
        yield process
    finally:
        assert process.stop() == 0, process.log()[-4000:]


@pytest.fixture(scope="module")
def pooled(repository: Path) -> Iterator[ServerProcess]:
    yield from _serve(repository, "--grpc-max-response-pool-size", str(POOL))


@pytest.fixture(scope="module")
def pooled_grpcio(repository: Path) -> Iterator[ServerProcess]:
    yield from _serve(
        repository, "--grpc-max-response-pool-size", str(POOL), "--grpc-transport", "grpcio"
    )


@pytest.fixture(scope="module")
def unpooled(repository: Path) -> Iterator[ServerProcess]:
    yield from _serve(repository)


class Progress:
    """What the model recorded for one request: sends returned, how it ended."""

    def __init__(self, folder: Path, request_id: str) -> None:
        self.folder = folder
        self.request_id = request_id

    def sent(self) -> int:
        return int(read_progress(self.folder, self.request_id, "sent") or 0)

    def ended(self) -> str:
        return read_progress(self.folder, self.request_id, "ended")


class SlowReader:
    """One ModelStreamInfer call on a raw HTTP/2 connection that reads a response only when
    asked, granting window for exactly the bytes read."""

    def __init__(self, client: RawClient) -> None:
        self.client = client
        self.buffer = bytearray()

    @classmethod
    async def start(cls, port: int, model: str, request_id: str, count: int) -> SlowReader:
        request = pb.ModelInferRequest(model_name=model, id=request_id)
        request.inputs.add(name="COUNT", datatype="INT32", shape=[1])
        request.raw_input_contents.append(np.array([count], np.int32).tobytes())
        client = await RawClient.connect(port)
        client.call(1, STREAM_PATH, message(request.SerializeToString()))
        return cls(client)

    async def response(self) -> pb.ModelStreamInferResponse:
        """The next response, read frame by frame."""
        while not self._complete():
            frame_type, _, stream_id, payload = await self._frame()
            if frame_type == h2.HEADERS:
                raise AssertionError(f"the stream ended: {self.client.decoder.decode(payload)}")
            if frame_type == h2.DATA and stream_id == 1 and payload:
                self.buffer += payload
                increment = struct.pack(">L", len(payload))
                self.client.send(
                    h2.frame(h2.WINDOW_UPDATE, 0, 0, increment)
                    + h2.frame(h2.WINDOW_UPDATE, 0, 1, increment)
                )
        size = int.from_bytes(self.buffer[1:5], "big")
        data = bytes(self.buffer[5 : 5 + size])
        del self.buffer[: 5 + size]
        return pb.ModelStreamInferResponse.FromString(data)

    async def status(self) -> str:
        """The stream's grpc-status, once its trailers come."""
        while True:
            frame_type, flags, stream_id, payload = await self._frame()
            if frame_type == h2.HEADERS and stream_id == 1 and flags & h2.END_STREAM:
                return dict(self.client.decoder.decode(payload)).get("grpc-status", "")

    async def _frame(self) -> tuple[int, int, int, bytes]:
        frame = frame_type, flags, _, payload = await self.client.read_frame(timeout=30)
        if frame_type == h2.SETTINGS and not flags & h2.ACK:
            self.client.send(h2.frame(h2.SETTINGS, h2.ACK, 0))
        elif frame_type == h2.PING and not flags & h2.ACK:
            self.client.send(h2.frame(h2.PING, h2.ACK, 0, payload))
        elif frame_type == h2.HEADERS and not flags & h2.END_STREAM:
            self.client.decoder.decode(payload)  # the answer's headers: HPACK state moves on
            return await self._frame()
        return frame

    def _complete(self) -> bool:
        return len(self.buffer) >= 5 and len(self.buffer) >= 5 + int.from_bytes(
            self.buffer[1:5], "big"
        )


@contextlib.asynccontextmanager
async def slow_stream(
    server: ServerProcess, model: str, request_id: str, progress_dir: Path
) -> AsyncIterator[tuple[SlowReader, Progress]]:
    """A slow reader's stream of ``COUNT`` responses, and the model's progress on it."""
    reader = await SlowReader.start(server.grpc_port, model, request_id, COUNT)
    try:
        yield reader, Progress(progress_dir, request_id)
    finally:
        await reader.client.close()


def check_response(response: pb.ModelStreamInferResponse, request_id: str, index: int) -> None:
    assert response.error_message == ""
    answer = response.infer_response
    assert answer.id == request_id
    assert answer.parameters["triton_final_response"].bool_param is False
    assert answer.raw_output_contents[0] == pattern(index, OUT_BYTES).tobytes(), index


async def read_while_held(
    reader: SlowReader, progress: Progress, reads: int, ahead: int = POOL + 1
) -> None:
    """Read ``reads`` responses one by one, checking before each that the model was let run
    exactly ``ahead`` sends ahead of what was read (the pool and the one being written), and
    no further."""
    for read in range(reads):
        held = min(read + ahead, COUNT)
        sent = await sends_reach(progress, held)
        assert sent == held, f"{sent} sends returned with {read} responses read"
        if read in (0, COUNT // 2):
            assert await stays_true_async(lambda held=held: progress.sent() == held, HELD_SECS)
        check_response(await reader.response(), progress.request_id, read)


async def sends_reach(progress: Progress, count: int) -> int:
    """The model's sends returned, once they are ``count`` or more."""
    return await wait_until_async(
        lambda: progress.sent() >= count and progress.sent(),
        what=lambda: f"{count} sends to return (at {progress.sent()})",
    )


@pytest.mark.parametrize("model", MODELS)
async def test_a_slow_reader_holds_the_model_back(
    pooled: ServerProcess, progress_dir: Path, model: str
) -> None:
    request_id = f"held-{model}"
    async with slow_stream(pooled, model, request_id, progress_dir) as (reader, progress):
        await read_while_held(reader, progress, COUNT)
        assert await reader.status() == "0"
        assert progress.ended() == "finished"


async def test_an_ensemble_holds_its_decoupled_step_back(
    pooled: ServerProcess, progress_dir: Path
) -> None:
    """The ensemble's pool is full with N + 1 (the last one it sent waits for room before it
    takes the next from its step), and the step's own pool holds N more."""
    request_id = "held-ensemble"
    async with slow_stream(pooled, "pooled_ensemble", request_id, progress_dir) as (
        reader,
        progress,
    ):
        await read_while_held(reader, progress, COUNT, ahead=2 * POOL + 1)
        assert await reader.status() == "0"


async def test_the_grpcio_transport_holds_the_model_back_too(
    pooled_grpcio: ServerProcess, progress_dir: Path
) -> None:
    request_id = "held-grpcio"
    async with slow_stream(pooled_grpcio, "pooled_threaded", request_id, progress_dir) as (
        reader,
        progress,
    ):
        await read_while_held(reader, progress, 3)


@pytest.mark.parametrize("model", MODELS)
async def test_without_the_flag_the_model_runs_ahead_of_a_client_that_reads_nothing(
    unpooled: ServerProcess, progress_dir: Path, model: str
) -> None:
    request_id = f"unheld-{model}"
    async with slow_stream(unpooled, model, request_id, progress_dir) as (reader, progress):
        await wait_until_async(
            lambda: progress.ended() == "finished",
            timeout=60,
            what=lambda: f"the model to finish (at {progress.sent()} sends)",
        )
        assert progress.sent() == COUNT
        for index in range(COUNT):
            check_response(await reader.response(), request_id, index)
        assert await reader.status() == "0"


def small_stream(server: ServerProcess, model: str, request_id: str, count: int) -> list:
    """``count`` responses of ``model`` through tritonclient's stream, read as they come."""
    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    count_input = grpcclient.InferInput("COUNT", [1], "INT32")
    count_input.set_data_from_numpy(np.array([count], np.int32))
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        client.async_stream_infer(
            model, [count_input], request_id=request_id, enable_empty_final_response=True
        )
        received = [results.get(timeout=60) for _ in range(count + 1)]
    finally:
        client.stop_stream()
        client.close()
    return received


@pytest.mark.parametrize("way", ("reset", "close"))
@pytest.mark.parametrize("model", MODELS)
async def test_a_client_that_goes_away_frees_a_held_model(
    pooled: ServerProcess, progress_dir: Path, model: str, way: str
) -> None:
    request_id = f"gone-{way}-{model}"
    async with slow_stream(pooled, model, request_id, progress_dir) as (reader, progress):
        await wait_until_async(lambda: progress.sent() == POOL + 1, what="the pool to fill")
        assert await stays_true_async(lambda: progress.sent() == POOL + 1, HELD_SECS)
        if way == "reset":
            reader.client.send(h2.frame(h2.RST_STREAM, 0, 1, struct.pack(">L", h2.CANCEL)))
        # "close": the connection closes on leaving
    # the waiting send returns, the model sees the cancellation and its execute returns
    await wait_until_async(
        lambda: progress.ended() == "cancelled",
        what=lambda: f"the model to see the cancel (ended '{progress.ended()}')",
    )
    assert progress.sent() < COUNT
    # the server goes on serving: the same model answers a next stream whole
    received = await asyncio.to_thread(small_stream, pooled, model, f"next-{request_id}", 3)
    assert all(error is None for _, error in received)
    for index, (result, _) in enumerate(received[:3]):
        assert result.as_numpy("OUT").tobytes() == pattern(index, OUT_BYTES).tobytes()
    final = received[-1][0].get_response()
    assert final.parameters["triton_final_response"].bool_param and not final.outputs


@pytest.mark.parametrize("model", MODELS)
def test_tritonclient_gets_every_response_in_order_through_a_small_pool(
    pooled: ServerProcess, model: str
) -> None:
    received = small_stream(pooled, model, f"whole-{model}", 12)
    assert all(error is None for _, error in received)
    for index, (result, _) in enumerate(received[:12]):
        assert result.get_response().id == f"whole-{model}"
        assert result.as_numpy("OUT").tobytes() == pattern(index, OUT_BYTES).tobytes()
    assert received[-1][0].get_response().parameters["triton_final_response"].bool_param
