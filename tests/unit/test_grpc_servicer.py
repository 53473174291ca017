"""The gRPC frontend on a loopback port, on each transport, driven by the stock tritonclient."""

from __future__ import annotations

import asyncio
import queue
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as tc
import tritonclient.grpc.aio as tc_aio
import uvloop
from tritonclient.utils import InferenceServerException

from tests.fake_server import FakeModel, FakeServer
from tests.support import wait_until_async
from triton_core.errors import Status, TritonError
from triton_core.frontends.grpc import create_grpc_server
from triton_core.frontends.grpc.limits import GrpcLimits
from triton_core.frontends.grpc.server import TRANSPORTS
from triton_core.frontends.grpc.servicer import DECOUPLED_MESSAGE
from triton_core.protos import grpc_service_pb2 as pb
from triton_core.protos import grpc_service_pb2_grpc as pb_grpc
from triton_core.protos import health_pb2, health_pb2_grpc
from triton_core.types import (
    InferenceRequest,
    InferenceResponse,
    ModelMetadata,
    ServerMetadata,
    Tensor,
    TensorMetadata,
)

MODELS = ("echo", "slow", "gated", "decoupled", "unavailable", "error_response", "crash")


_TENSORS = ((TensorMetadata("x", "FP32", (-1, 4)),), (TensorMetadata("y", "FP32", (-1, 4)),))


class StandInServer(FakeServer):
    """The verified fake with a few behaviours to test the gRPC frontend against.

    ``echo`` answers its inputs as outputs (only the requested ones, when named); ``slow``
    also sleeps ``delay`` seconds first; ``decoupled`` is decoupled; the others fail.
    """

    def __init__(self) -> None:
        super().__init__(
            [
                FakeModel(name, *_TENSORS, decoupled=name == "decoupled")
                for name in MODELS
                if name not in ("echo", "unavailable")
            ]
            + [
                FakeModel("echo", *_TENSORS, versions=(1, 2), ready={1, 2}),
                FakeModel("unavailable", *_TENSORS, ready=set()),
            ],
            handler=self._answer,
            metadata=ServerMetadata("triton", "2.73.0", ("classification", "model_configuration")),
        )
        self.cancelled = 0
        self.started = asyncio.Event()
        #: the ``gated`` model answers once this is set
        self.gate = asyncio.Event()

    async def _answer(self, request: InferenceRequest) -> InferenceResponse:
        name = request.model_name
        if name == "unavailable":
            raise TritonError(Status.UNAVAILABLE, "model 'unavailable' is not at ready state")
        if name == "error_response":
            return InferenceResponse(error=TritonError(Status.INVALID_ARG, "bad input 'x'"))
        if name == "crash":
            raise RuntimeError("kaboom")
        if name == "slow":
            await self._sleep(float(request.inputs["delay"].data.flat[0]))
        if name == "gated":
            await self.gate.wait()
        outputs = list(request.inputs.values())
        if request.outputs is not None:
            wanted = request.output_names() or []
            for output in wanted:
                if output not in request.inputs:
                    raise TritonError(
                        Status.INVALID_ARG,
                        f"unexpected inference output '{output}' for model '{name}'",
                    )
            outputs = [t for t in outputs if t.name in wanted]
        return InferenceResponse(
            outputs=[Tensor(t.name, t.datatype, t.data) for t in outputs],
            parameters=dict(request.parameters),
            model_name=name,
            model_version=1,
            id=request.id,
        )

    async def _sleep(self, delay: float) -> None:
        """The slow model's work: a client may cancel it (counted)."""
        self.started.set()
        try:
            await asyncio.sleep(delay)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise


@pytest.fixture
def stand_in() -> StandInServer:
    return StandInServer()


@pytest.fixture(params=TRANSPORTS)
def transport(request: pytest.FixtureRequest) -> str:
    """Every test that serves runs once on each transport."""
    return request.param


@pytest.fixture
async def url(stand_in: StandInServer, transport: Any) -> AsyncIterator[str]:
    server = create_grpc_server(stand_in, "127.0.0.1", 0, transport=transport)
    port = server.port  # bound by the system: no race for a free port
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


@pytest.fixture
async def aio_client(url: str) -> AsyncIterator[tc_aio.InferenceServerClient]:
    client = tc_aio.InferenceServerClient(url)
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
async def sync_client(url: str) -> AsyncIterator[tc.InferenceServerClient]:
    client = tc.InferenceServerClient(url)
    try:
        yield client
    finally:
        await asyncio.to_thread(client.close)


@pytest.fixture
async def stub(url: str) -> AsyncIterator[pb_grpc.GRPCInferenceServiceStub]:
    """A raw stub in our own descriptor pool, for requests tritonclient will not build."""
    async with grpc.aio.insecure_channel(url) as channel:
        yield pb_grpc.GRPCInferenceServiceStub(channel)


def make_input(name: str, data: np.ndarray, datatype: str | None = None) -> tc.InferInput:
    if datatype is None:
        datatype = "BYTES" if data.dtype == object else tc.np_to_triton_dtype(data.dtype)
    tensor = tc.InferInput(name, list(data.shape), datatype)
    tensor.set_data_from_numpy(data)
    return tensor


def status_of(exc: pytest.ExceptionInfo[InferenceServerException]) -> str:
    return str(exc.value.status())


async def in_thread(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run a blocking tritonclient call off the loop that serves it."""
    return await asyncio.to_thread(func, *args, **kwargs)


# ---------------------------------------------------------------------------------------
# health and metadata


async def test_health_and_metadata_with_sync_client(
    sync_client: tc.InferenceServerClient, stand_in: StandInServer
) -> None:
    assert await in_thread(sync_client.is_server_live)
    assert await in_thread(sync_client.is_server_ready)
    assert await in_thread(sync_client.is_model_ready, "echo")
    assert not await in_thread(sync_client.is_model_ready, "unavailable")
    stand_in.ready = False
    assert not await in_thread(sync_client.is_server_ready)

    meta = await in_thread(sync_client.get_server_metadata, as_json=True)
    assert meta == {
        "name": "triton",
        "version": "2.73.0",
        "extensions": ["classification", "model_configuration"],
    }
    model = await in_thread(sync_client.get_model_metadata, "echo", as_json=True)
    assert model["name"] == "echo"
    assert model["versions"] == ["1", "2"]
    assert model["platform"] == "python"
    assert model["inputs"] == [{"name": "x", "datatype": "FP32", "shape": ["-1", "4"]}]
    config = await in_thread(sync_client.get_model_config, "decoupled", as_json=True)
    assert config["config"]["max_batch_size"] == 8
    assert config["config"]["model_transaction_policy"] == {"decoupled": True}
    assert config["config"]["input"][0]["dims"] == ["4"]


async def test_model_version_is_parsed(
    aio_client: tc_aio.InferenceServerClient,
) -> None:
    assert await aio_client.is_model_ready("echo", model_version="2")
    with pytest.raises(InferenceServerException) as exc:
        await aio_client.get_model_metadata("echo", model_version="latest")
    assert status_of(exc) == "StatusCode.INVALID_ARGUMENT"
    assert "latest" in exc.value.message()


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.get_model_metadata("nope"),
        lambda c: c.get_model_config("nope"),
    ],
    ids=["ModelMetadata", "ModelConfig"],
)
async def test_unknown_model_is_an_error_status(
    aio_client: tc_aio.InferenceServerClient, call: Callable[[Any], Any]
) -> None:
    with pytest.raises(InferenceServerException) as exc:
        await call(aio_client)
    assert status_of(exc) == "StatusCode.INVALID_ARGUMENT"
    assert exc.value.message() == "Request for unknown model: 'nope' is not found"


async def test_health_check_service(url: str, stand_in: StandInServer) -> None:
    async with grpc.aio.insecure_channel(url) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        reply = await health.Check(health_pb2.HealthCheckRequest())
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        stand_in.ready = False
        reply = await health.Check(health_pb2.HealthCheckRequest(service="anything"))
        assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING


# ---------------------------------------------------------------------------------------
# ModelInfer


def echo_inputs() -> dict[str, np.ndarray]:
    return {
        "f32": np.random.default_rng(0).random((1, 64), dtype=np.float32),
        "f16": np.arange(6, dtype=np.float16).reshape(2, 3),
        "bf16": np.array([1.5, -2.0, 3.0], dtype=ml_dtypes.bfloat16),
        "i8": np.array([-128, 0, 127], dtype=np.int8),
        "u64": np.array([0, 2**64 - 1], dtype=np.uint64),
        "b": np.array([True, False]),
        "s": np.array([b"a\x00b", b"", "\u00e9".encode()], dtype=object),
    }


def check_echo(result: tc.InferResult, inputs: dict[str, np.ndarray]) -> None:
    for name, data in inputs.items():
        got = result.as_numpy(name)
        assert got is not None, name
        if data.dtype == object:
            assert got.tolist() == data.tolist()
        else:
            np.testing.assert_array_equal(got, data)


async def test_infer_every_type_with_sync_client(
    sync_client: tc.InferenceServerClient, stand_in: StandInServer
) -> None:
    inputs = echo_inputs()
    result = await in_thread(
        sync_client.infer,
        "echo",
        [make_input(n, d, "BF16" if n == "bf16" else None) for n, d in inputs.items()],
        request_id="r-1",
        parameters={"mode": "fast", "k": 3},
    )
    check_echo(result, inputs)
    response = result.get_response()
    assert response.id == "r-1"
    assert response.model_name == "echo"
    assert response.model_version == "1"
    assert response.parameters["mode"].string_param == "fast"
    assert response.parameters["k"].int64_param == 3
    (request,) = stand_in.requests
    assert request.parameters == {"mode": "fast", "k": 3}


async def test_infer_with_aio_client_concurrently(
    aio_client: tc_aio.InferenceServerClient,
) -> None:
    async def one(i: int) -> None:
        data = np.full((1, 4), i, dtype=np.float32)
        result = await aio_client.infer("echo", [make_input("x", data)], request_id=str(i))
        np.testing.assert_array_equal(result.as_numpy("x"), data)
        assert result.get_response().id == str(i)

    await asyncio.gather(*(one(i) for i in range(16)))


async def test_requested_outputs_and_sequence_parameters(
    aio_client: tc_aio.InferenceServerClient, stand_in: StandInServer
) -> None:
    a = np.zeros((1, 2), np.float32)
    b = np.ones((1, 2), np.int32)
    result = await aio_client.infer(
        "echo",
        [make_input("a", a), make_input("b", b)],
        outputs=[tc_aio.InferRequestedOutput("b", class_count=2)],
        sequence_id=7,
        sequence_start=True,
        priority=3,
        timeout=500,
    )
    assert result.as_numpy("a") is None
    np.testing.assert_array_equal(result.as_numpy("b"), b)
    (request,) = stand_in.requests
    assert [(o.name, o.classification) for o in request.outputs or []] == [("b", 2)]
    assert (request.correlation_id, request.priority, request.timeout_us) == (7, 3, 500)


async def test_large_tensor_beyond_grpc_default_limit(
    aio_client: tc_aio.InferenceServerClient,
) -> None:
    data = np.arange(6 * 1024 * 1024, dtype=np.float32)  # 24 MiB each way
    result = await aio_client.infer("echo", [make_input("x", data)])
    np.testing.assert_array_equal(result.as_numpy("x"), data)


async def test_decoupled_model_on_model_infer_is_unimplemented(
    aio_client: tc_aio.InferenceServerClient, stand_in: StandInServer
) -> None:
    with pytest.raises(InferenceServerException) as exc:
        await aio_client.infer("decoupled", [make_input("x", np.zeros(1, np.float32))])
    assert status_of(exc) == "StatusCode.UNIMPLEMENTED"
    assert exc.value.message() == DECOUPLED_MESSAGE
    assert not stand_in.requests


@pytest.mark.parametrize(
    ("model", "code", "message"),
    [
        ("nope", "INVALID_ARGUMENT", "Request for unknown model: 'nope' is not found"),
        ("unavailable", "UNAVAILABLE", "model 'unavailable' is not at ready state"),
        ("error_response", "INVALID_ARGUMENT", "bad input 'x'"),
        ("crash", "INTERNAL", "kaboom"),
    ],
)
async def test_server_errors_map_to_grpc_status(
    aio_client: tc_aio.InferenceServerClient, model: str, code: str, message: str
) -> None:
    with pytest.raises(InferenceServerException) as exc:
        await aio_client.infer(model, [make_input("x", np.zeros(1, np.float32))])
    assert status_of(exc) == f"StatusCode.{code}"
    assert exc.value.message() == message


async def test_every_triton_error_status_maps(
    stub: pb_grpc.GRPCInferenceServiceStub, transport: Any
) -> None:
    # the servicer maps through TritonError.status.grpc_code_name: check each member once
    for status in Status:
        error = TritonError(status, f"status {status.name}")

        class Failing(StandInServer):
            def model_metadata(self, name: str, version: int = -1) -> ModelMetadata:
                raise error  # noqa: B023 - used within this iteration only

        server = create_grpc_server(Failing(), "127.0.0.1", 0, transport=transport)
        port = server.port  # bound by the system: no race for a free port
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                with pytest.raises(grpc.aio.AioRpcError) as exc:
                    await pb_grpc.GRPCInferenceServiceStub(channel).ModelMetadata(
                        pb.ModelMetadataRequest(name="echo")
                    )
        finally:
            await server.stop(None)
        assert exc.value.code() == grpc.StatusCode[status.grpc_code_name]
        assert exc.value.details() == f"status {status.name}"


def raw_request(model: str = "echo") -> pb.ModelInferRequest:
    message = pb.ModelInferRequest(model_name=model)
    message.inputs.add(name="x", datatype="FP32", shape=[2])
    message.raw_input_contents.append(np.zeros(2, np.float32).tobytes())
    return message


async def test_wire_errors_are_invalid_argument(stub: pb_grpc.GRPCInferenceServiceStub) -> None:
    short = raw_request()
    short.raw_input_contents[0] = b"\x00" * 4
    mixed = raw_request()
    mixed.inputs[0].contents.fp32_contents.extend([1.0, 2.0])
    half = pb.ModelInferRequest(model_name="echo")
    half.inputs.add(name="x", datatype="FP16", shape=[1]).contents.fp32_contents.append(1.0)
    reserved = raw_request()
    reserved.parameters["triton_secret"].bool_param = True
    cases = {
        "input byte size mismatch for input 'x' for model 'echo'. Expected 8, got 4": short,
        "contents field must not be specified when using raw_input_contents for 'x' for "
        "model 'echo'": mixed,
        "FP16 data must be sent in raw_input_contents": half,
        "triton_secret": reserved,
    }
    for fragment, message in cases.items():
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await stub.ModelInfer(message)
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert fragment in (exc.value.details() or "")


async def test_typed_contents_over_the_wire(stub: pb_grpc.GRPCInferenceServiceStub) -> None:
    message = pb.ModelInferRequest(model_name="echo", id="typed")
    tensor = message.inputs.add(name="x", datatype="INT16", shape=[3])
    tensor.contents.int_contents.extend([-5, 0, 300])
    strings = message.inputs.add(name="s", datatype="BYTES", shape=[2])
    strings.contents.bytes_contents.extend([b"\x00a", b"b"])
    reply = await stub.ModelInfer(message)
    assert reply.id == "typed"
    assert [o.name for o in reply.outputs] == ["x", "s"]
    assert np.frombuffer(reply.raw_output_contents[0], np.int16).tolist() == [-5, 0, 300]
    assert reply.raw_output_contents[1] == b"\x02\x00\x00\x00\x00a\x01\x00\x00\x00b"


# ---------------------------------------------------------------------------------------
# ModelStreamInfer


async def test_sync_client_stream(
    sync_client: tc.InferenceServerClient,
) -> None:
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    await in_thread(sync_client.start_stream, lambda result, error: answers.put((result, error)))
    try:
        for i in range(3):
            data = np.full((2,), i, np.int32)
            await in_thread(
                sync_client.async_stream_infer, "echo", [make_input("x", data)], request_id=str(i)
            )
        await in_thread(
            sync_client.async_stream_infer,
            "nope",
            [make_input("x", np.zeros(1, np.int32))],
            request_id="bad",
        )
        await in_thread(
            sync_client.async_stream_infer,
            "echo",
            [make_input("x", np.full((2,), 9, np.int32))],
            request_id="after-error",
            enable_empty_final_response=True,
        )
        got = [await in_thread(answers.get, timeout=10) for _ in range(5)]
    finally:
        await in_thread(sync_client.stop_stream)

    results = {r.get_response().id: r for r, e in got if e is None}
    errors = [e for r, e in got if e is not None]
    assert sorted(results) == ["0", "1", "2", "after-error"]
    for request_id, result in results.items():
        response = result.get_response()
        assert response.parameters["triton_final_response"].bool_param is True
        expected = 9 if request_id == "after-error" else int(request_id)
        np.testing.assert_array_equal(result.as_numpy("x"), np.full((2,), expected))
    (error,) = errors
    assert error.message() == "Request for unknown model: 'nope' is not found"


async def test_stream_answers_a_model_that_is_not_decoupled_in_request_order(
    aio_client: tc_aio.InferenceServerClient,
) -> None:
    # as Triton: the fast answer waits for the slow one asked before it
    async def requests() -> AsyncIterator[dict[str, Any]]:
        for request_id, delay in (("slow", 0.5), ("fast", 0.0)):
            yield {
                "model_name": "slow",
                "inputs": [make_input("delay", np.array([delay], np.float32))],
                "request_id": request_id,
            }

    order = []
    async for result, error in aio_client.stream_infer(requests()):
        assert error is None
        order.append(result.get_response().id)
    assert order == ["slow", "fast"]


async def test_stream_errors_stay_in_band_and_the_stream_goes_on(
    aio_client: tc_aio.InferenceServerClient,
) -> None:
    got: list[Any] = []

    async def requests() -> AsyncIterator[dict[str, Any]]:
        yield {"model_name": "crash", "inputs": [make_input("x", np.zeros(1))], "request_id": "c"}
        await wait_until_async(lambda: got, what="the first answer")  # answers in this order
        yield {"model_name": "decoupled", "inputs": [make_input("x", np.ones(1))]}

    async for item in aio_client.stream_infer(requests()):
        got.append(item)
    assert len(got) == 2
    (none, error), (result, no_error) = got
    assert none is None and error.message() == "kaboom"
    assert no_error is None
    # a decoupled model is served on the stream
    np.testing.assert_array_equal(result.as_numpy("x"), np.ones(1))
    response = result.get_response()
    assert response.parameters["triton_final_response"].bool_param is True


async def test_a_stream_is_not_read_past_its_requests_in_flight(
    stand_in: StandInServer, transport: Any
) -> None:
    limits = GrpcLimits(max_stream_requests_in_flight=2)
    server = create_grpc_server(stand_in, "127.0.0.1", 0, transport=transport, limits=limits)
    await server.start()
    sent = 5

    async def requests() -> AsyncIterator[pb.ModelInferRequest]:
        for i in range(sent):
            message = raw_request("gated")
            message.id = str(i)
            yield message

    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            call = pb_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(requests())
            await wait_until_async(lambda: len(stand_in.requests) == 2, what="two in flight")
            # a third would be read at once without the bound; with it, never while gated
            await asyncio.sleep(0.3)
            assert len(stand_in.requests) == 2
            stand_in.gate.set()
            replies = [reply async for reply in call]
    finally:
        await server.stop(None)
    assert [reply.infer_response.id for reply in replies] == [str(i) for i in range(sent)]
    assert len(stand_in.requests) == sent


async def test_stream_error_keeps_request_id(stub: pb_grpc.GRPCInferenceServiceStub) -> None:
    bad = raw_request()
    bad.id = "broken"
    bad.raw_input_contents[0] = b"\x00"

    async def requests() -> AsyncIterator[pb.ModelInferRequest]:
        yield bad

    replies = [reply async for reply in stub.ModelStreamInfer(requests())]
    (reply,) = replies
    assert reply.infer_response.id == "broken"
    assert "input byte size mismatch for input 'x' for model 'echo'" in reply.error_message


async def test_stream_with_triton_grpc_error_header_ends_with_status(
    url: str,
) -> None:
    answered = asyncio.Event()

    async def requests() -> AsyncIterator[pb.ModelInferRequest]:
        yield raw_request("echo")
        await asyncio.wait_for(answered.wait(), 10)  # the error comes after the answer
        yield raw_request("unavailable")
        await asyncio.sleep(10)  # the server must not wait for the client to close
        yield raw_request("echo")

    async with grpc.aio.insecure_channel(url) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        call = stub.ModelStreamInfer(requests(), metadata=(("triton_grpc_error", "true"),))
        first = await call.read()
        answered.set()
        assert first.error_message == ""
        with pytest.raises(grpc.aio.AioRpcError) as exc:
            await asyncio.wait_for(call.read(), timeout=5)
    assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
    assert exc.value.details() == "model 'unavailable' is not at ready state"


async def test_stream_grpc_error_header_with_tritonclient(
    aio_client: tc_aio.InferenceServerClient,
) -> None:
    async def requests() -> AsyncIterator[dict[str, Any]]:
        yield {"model_name": "nope", "inputs": [make_input("x", np.zeros(1))]}

    with pytest.raises(grpc.aio.AioRpcError) as exc:
        async for _ in aio_client.stream_infer(requests(), headers={"triton_grpc_error": "true"}):
            pass
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_client_cancel_stops_work_in_flight(
    aio_client: tc_aio.InferenceServerClient, stand_in: StandInServer
) -> None:
    async def requests() -> AsyncIterator[dict[str, Any]]:
        yield {"model_name": "slow", "inputs": [make_input("delay", np.array([30.0]))]}
        await asyncio.sleep(30)

    stream = aio_client.stream_infer(requests())
    reader = asyncio.ensure_future(stream.__anext__())
    await asyncio.wait_for(stand_in.started.wait(), timeout=5)
    stream.cancel()
    with pytest.raises(BaseException):  # noqa: B017 - cancelled read, type differs by version
        await reader
    await wait_until_async(lambda: stand_in.cancelled, what="the cancel")
    assert stand_in.cancelled == 1


# ---------------------------------------------------------------------------------------
# event loops


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_runs_on_uvloop(transport: Any) -> None:
    """The CLI runs grpc.aio on the server's loop: uvloop. One round of everything on it."""

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        assert type(loop).__module__.startswith("uvloop")
        server = create_grpc_server(StandInServer(), "127.0.0.1", 0, transport=transport)
        port = server.port  # bound by the system: no race for a free port
        await server.start()
        client = tc_aio.InferenceServerClient(f"127.0.0.1:{port}")
        try:
            assert await client.is_server_ready()
            data = np.arange(64, dtype=np.float32).reshape(1, 64)
            result = await client.infer("echo", [make_input("x", data)])
            np.testing.assert_array_equal(result.as_numpy("x"), data)

            async def requests() -> AsyncIterator[dict[str, Any]]:
                for i in range(3):
                    yield {"model_name": "echo", "inputs": [make_input("x", data + i)]}

            results = [r async for r, e in client.stream_infer(requests()) if e is None]
            assert len(results) == 3
            sync_client = tc.InferenceServerClient(f"127.0.0.1:{port}")
            result = await asyncio.to_thread(sync_client.infer, "echo", [make_input("x", data)])
            np.testing.assert_array_equal(result.as_numpy("x"), data)
            sync_client.close()
        finally:
            await client.close()
            await server.stop(None)

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(scenario())


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_create_grpc_server_rejects_a_busy_port(transport: Any) -> None:
    async def scenario() -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            sock.listen()
            port = sock.getsockname()[1]
            with pytest.raises(RuntimeError):
                create_grpc_server(StandInServer(), "127.0.0.1", port, transport=transport)

    asyncio.run(scenario())


# ---------------------------------------------------------------------------------------
# against the real Server (in process, numpy test backend)


@pytest.fixture
async def real_url(numpy_repo: Any, transport: Any) -> AsyncIterator[str]:
    from tests.support import numpy_server, write_numpy_model

    write_numpy_model(numpy_repo, "streamer", extra="model_transaction_policy { decoupled: true }")
    server = numpy_server(numpy_repo)
    await server.start()
    grpc_server = create_grpc_server(server, "127.0.0.1", 0, transport=transport)
    port = grpc_server.port  # bound by the system: no race for a free port
    await grpc_server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await grpc_server.stop(None)
        await server.stop()


async def test_real_server_end_to_end(real_url: str) -> None:
    async with tc_aio.InferenceServerClient(real_url) as client:
        assert await client.is_server_live() and await client.is_server_ready()
        assert await client.is_model_ready("add_sub")
        assert not await client.is_model_ready("nope")  # as Triton: false, no error status
        meta = await client.get_model_metadata("add_sub", as_json=True)
        assert meta["inputs"][0] == {"name": "INPUT0", "datatype": "INT32", "shape": ["-1", "4"]}
        config = (await client.get_model_config("add_sub")).config
        assert config.max_batch_size == 8 and list(config.input[0].dims) == [4]

        a = np.arange(8, dtype=np.int32).reshape(2, 4)
        inputs = [make_input("INPUT0", a), make_input("INPUT1", a)]
        result = await client.infer("add_sub", inputs, request_id="x1")
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a * 2)
        assert (result.get_response().id, result.get_response().model_version) == ("x1", "1")

        with pytest.raises(InferenceServerException) as exc:
            await client.infer("nope", inputs)
        assert status_of(exc) == "StatusCode.NOT_FOUND"
        assert exc.value.message() == "Request for unknown model: 'nope' is not found"

        with pytest.raises(InferenceServerException) as exc:
            await client.infer("streamer", inputs)
        assert status_of(exc) == "StatusCode.UNIMPLEMENTED"
        assert exc.value.message() == DECOUPLED_MESSAGE

        async def requests() -> AsyncIterator[dict[str, Any]]:
            yield {"model_name": "add_sub", "inputs": inputs, "request_id": "s1"}
            yield {"model_name": "identity", "inputs": inputs[:1], "request_id": "s2"}

        got = {}
        async for item, error in client.stream_infer(requests()):
            got[item.get_response().id if item else "error"] = (item, error)
        assert set(got) == {"s1", "error"}
        assert "unexpected shape for input 'INPUT0' for model 'identity'" in (
            got["error"][1].message()
        )


# ---------------------------------------------------------------------------------------
# a server that fails everywhere


class BrokenServer(StandInServer):
    """Raises ``error`` from every call."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    def model(self, name: str, version: int = -1) -> FakeModel:
        raise self.error

    def is_live(self) -> bool:
        raise self.error

    def is_ready(self) -> bool:
        raise self.error

    def metadata(self) -> ServerMetadata:
        raise self.error


@pytest.mark.parametrize(
    ("error", "code", "message"),
    [
        (RuntimeError("disk on fire"), "INTERNAL", "disk on fire"),
        (KeyError("k"), "INTERNAL", "'k'"),
        (TritonError(Status.UNAVAILABLE, "shutting down"), "UNAVAILABLE", "shutting down"),
    ],
)
async def test_every_rpc_reports_server_failures(
    error: Exception, code: str, message: str, transport: Any
) -> None:
    grpc_server = create_grpc_server(BrokenServer(error), "127.0.0.1", 0, transport=transport)
    port = grpc_server.port  # bound by the system: no race for a free port
    await grpc_server.start()
    try:
        async with tc_aio.InferenceServerClient(f"127.0.0.1:{port}") as client:
            calls = [
                client.is_server_live(),
                client.is_server_ready(),
                client.is_model_ready("m"),
                client.get_server_metadata(),
                client.get_model_metadata("m"),
                client.get_model_config("m"),
                client.infer("m", [make_input("x", np.zeros(1, np.float32))]),
            ]
            for call in calls:
                with pytest.raises(InferenceServerException) as exc:
                    await call
                assert status_of(exc) == f"StatusCode.{code}"
                assert exc.value.message() == message

            async def requests() -> AsyncIterator[dict[str, Any]]:
                yield {
                    "model_name": "m",
                    "inputs": [make_input("x", np.zeros(1))],
                    "request_id": "i",
                }

            (result, stream_error), *_ = [item async for item in client.stream_infer(requests())]
            assert result is None and stream_error.message() == message

        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
            assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING
    finally:
        await grpc_server.stop(None)


async def test_stream_reports_error_responses(aio_client: tc_aio.InferenceServerClient) -> None:
    async def requests() -> AsyncIterator[dict[str, Any]]:
        yield {"model_name": "error_response", "inputs": [make_input("x", np.zeros(1))]}

    ((result, error),) = [item async for item in aio_client.stream_infer(requests())]
    assert result is None and error.message() == "bad input 'x'"
