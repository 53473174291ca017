"""The one way every protocol answers an inference request (frontends/infer.py)."""

from __future__ import annotations

import asyncio
import re

import numpy as np
import pytest

from tests.fake_server import FakeModel, FakeServer
from triton_core.errors import Status, TritonError, invalid_arg
from triton_core.frontends.header_forwarding import HeaderForwarder
from triton_core.frontends.infer import DECOUPLED_MESSAGES, InferPath
from triton_core.types import InferenceRequest, InferenceResponse, Tensor, TensorMetadata

TENSOR = (TensorMetadata("x", "FP32", (-1, 2)),)


class Recorded:
    """A protocol's reply that keeps what it was asked to send."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.answered = loop.create_future()

    def respond(self, response: InferenceResponse, request: InferenceRequest) -> None:
        self.answered.set_result(response)

    def fail(self, error: TritonError) -> None:
        self.answered.set_result(error)


def request(model: str = "m") -> InferenceRequest:
    return InferenceRequest(model, {"x": Tensor("x", "FP32", np.ones((1, 2), np.float32))})


def fake(**model: object) -> FakeServer:
    return FakeServer([FakeModel("m", TENSOR, TENSOR, **model)])  # type: ignore[arg-type]


async def answer(path: InferPath, sent: InferenceRequest, headers=()) -> object:
    reply = Recorded(asyncio.get_running_loop())
    path.answer(sent, headers, path.received(), reply)
    return await reply.answered


async def test_an_answer_and_the_headers_that_match_forwarded_as_parameters() -> None:
    server = fake()
    path = InferPath(server, "GRPC", forwarder=HeaderForwarder(re.compile("^x-")))
    sent = request()
    response = await answer(path, sent, [("x-tenant", "a"), ("other", "b")])
    assert isinstance(response, InferenceResponse)
    assert server.requests[0].parameters == {"x-tenant": "a"}


@pytest.mark.parametrize("protocol", ["HTTP", "GRPC"])
async def test_a_decoupled_model_is_refused_in_the_protocols_words(protocol: str) -> None:
    server = fake(decoupled=True)
    error = await answer(InferPath(server, protocol), request())
    assert isinstance(error, TritonError) and error.status is Status.UNSUPPORTED
    assert error.message == DECOUPLED_MESSAGES[protocol]
    assert server.requests == []  # refused before it was submitted


async def test_errors_of_every_kind_become_answers() -> None:
    async def fails(sent: InferenceRequest) -> InferenceResponse:
        raise invalid_arg("bad input")

    server = fake()
    server.handler = fails
    error = await answer(InferPath(server, "HTTP"), request())
    assert isinstance(error, TritonError) and error.message == "bad input"

    async def breaks(sent: InferenceRequest) -> InferenceResponse:
        raise RuntimeError("a bug")

    server.handler = breaks
    error = await answer(InferPath(server, "HTTP"), request())
    assert isinstance(error, TritonError) and error.status is Status.INTERNAL
    unknown = await answer(InferPath(server, "HTTP"), request("nope"))
    assert isinstance(unknown, TritonError) and "nope" in unknown.message


async def test_a_caller_that_goes_away_cancels_the_work_and_gets_no_answer() -> None:
    started = asyncio.Event()

    async def slow(sent: InferenceRequest) -> InferenceResponse:
        started.set()
        await asyncio.Event().wait()
        raise AssertionError("cancelled before")

    server = fake()
    server.handler = slow
    path = InferPath(server, "GRPC")
    reply = Recorded(asyncio.get_running_loop())
    submitted = path.answer(request(), (), 0, reply)
    assert submitted is not None
    await started.wait()
    submitted.cancel()
    await asyncio.sleep(0)
    assert not reply.answered.done()
