"""Hostile gRPC clients against the real server process, one class of attack per test.

During each attack another client is served (tritonclient.grpc and an HTTP health check, each
answered within 2 s), the server's peak RSS grows by less than 100 MiB, and the attacking
connection gets the RFC's answer (GOAWAY and its code, RST_STREAM, or the end).
"""

from __future__ import annotations

import asyncio
import gzip
import struct
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.support import ServerProcess
from tests.unit.test_grpc_http2 import RawClient, message, status
from tests.unit.test_grpc_http2_limits import (
    CALL_LITERALS,
    method_confusions,
    non_reading_client,
)
from triton_core.frontends.grpc import frames as h2
from triton_core.frontends.grpc.hpack_codec import encode_integer, encode_literal
from triton_core.protos import grpc_service_pb2 as pb

INFER = "/inference.GRPCInferenceService/ModelInfer"
LIVE = "/inference.GRPCInferenceService/ServerLive"
MAX_MESSAGE = 4 << 20
MIB = 1 << 20


@pytest.fixture(scope="module")
def hostile_server(onnx_repository: Path):
    process = ServerProcess(
        [onnx_repository],
        "--grpc-max-message-size", str(MAX_MESSAGE),
        "--grpc-max-buffered-input", str(16 * MIB),
        "--grpc-http2-max-queued-output", str(64 * 1024),
        "--grpc-http2-handshake-timeout", "500",
        "--grpc-http2-frame-timeout", "500",
    )  # fmt: skip
    with process:
        process.wait_ready()
        yield process
    assert process.process.returncode == 0, process.log()[-4000:]  # a clean stop after it all


def vm_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def others_are_served(server: ServerProcess) -> None:
    """A tritonclient call and an HTTP health check, each answered within 2 s."""
    start = time.monotonic()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        assert client.is_server_live(client_timeout=2.0)
    finally:
        client.close()
    assert time.monotonic() - start < 2.0
    start = time.monotonic()
    with urllib.request.urlopen(f"http://{server.http_url}/v2/health/live", timeout=2) as reply:
        assert reply.status == 200
    assert time.monotonic() - start < 2.0


Attack = Callable[[int, asyncio.Event], Awaitable[Any]]


def under_attack(server: ServerProcess, attack: Attack) -> Any:
    """Run ``attack(grpc_port, sent)`` and, once it sets ``sent``, serve others; its result."""
    pid = server.process.pid
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # the peak RSS restarts from now
    before = vm_kib(pid, "VmRSS")

    async def main() -> Any:
        sent = asyncio.Event()
        task = asyncio.ensure_future(attack(server.grpc_port, sent))
        await asyncio.wait_for(sent.wait(), 20)
        await asyncio.to_thread(others_are_served, server)
        return await asyncio.wait_for(task, 20)

    result = asyncio.run(main())
    grown = vm_kib(pid, "VmHWM") - before
    print(f"\n{attack.__name__}: peak RSS grew by {grown / 1024:.1f} MiB")
    assert grown < 100 * 1024, f"peak RSS grew by {grown} KiB"
    others_are_served(server)
    return result


async def connect(port: int) -> RawClient:
    return await RawClient.connect(port)


async def goaway_code(client: RawClient, timeout: float = 10.0) -> tuple[int, bytes]:
    """Read until GOAWAY, then until the end: the GOAWAY's code and debug data."""
    try:
        while True:
            frame_type, _, _, payload = await client.read_frame(timeout)
            if frame_type == h2.GOAWAY:
                break
        assert await asyncio.wait_for(client.reader.read(), timeout) == b""
    finally:
        await client.close()
    return struct.unpack(">L", payload[4:8])[0], payload[8:]


def infer_request(model: str, data: np.ndarray) -> bytes:
    request = pb.ModelInferRequest(model_name=model)
    request.inputs.add(name="INPUT0", datatype="UINT8", shape=list(data.shape))
    request.raw_input_contents.append(data.tobytes())
    return request.SerializeToString()


def inference_count(server: ServerProcess, model: str) -> int:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        stats = client.get_inference_statistics(model, as_json=True)
    finally:
        client.close()
    return int(stats["model_stats"][0].get("inference_count", 0))


# ---------------------------------------------------------------------------------------


def test_a_replayed_header_block_does_not_run_the_model_again(hostile_server) -> None:
    before = inference_count(hostile_server, "identity_uint8")

    async def replay_header_blocks(port: int, sent: asyncio.Event) -> int:
        client = await connect(port)
        request = infer_request("identity_uint8", np.zeros((1, 1 << 20), np.uint8))
        block = client.headers_block(INFER)
        client.send(h2.frame(h2.HEADERS, h2.END_HEADERS, 1, block))
        client.send_data(1, message(request), end_stream=True)
        trailers = h2.frame(h2.HEADERS, h2.END_HEADERS | h2.END_STREAM, 1, b"\x88")
        client.send(trailers * 20)  # while the call runs: each would start it again
        sent.set()
        code, _ = await goaway_code(client)  # on a closed stream, at the latest
        assert code == h2.PROTOCOL_ERROR
        return await asyncio.to_thread(inference_count, hostile_server, "identity_uint8")

    assert under_attack(hostile_server, replay_header_blocks) - before <= 1


def test_calls_sharing_a_connection_never_get_each_others_method(hostile_server) -> None:
    async def churn_the_table(port: int, sent: asyncio.Event) -> int:
        client = await connect(port)
        sent.set()  # the attack is the whole exchange
        try:
            return await method_confusions(client, 100)
        finally:
            await client.close()

    assert under_attack(hostile_server, churn_the_table) == 0


def test_a_continuation_flood(hostile_server) -> None:
    async def continuation_flood(port: int, sent: asyncio.Event) -> int:
        client = await connect(port)
        frames = h2.frame(h2.HEADERS, 0, 1, b"\x88")
        frames += h2.frame(h2.CONTINUATION, 0, 1, b"\x88") * 15_000
        client.send(frames)
        sent.set()
        code, _ = await goaway_code(client)
        return code

    assert under_attack(hostile_server, continuation_flood) == h2.ENHANCE_YOUR_CALM


def test_an_hpack_bomb_on_many_connections(hostile_server) -> None:
    async def hpack_bombs(port: int, sent: asyncio.Event) -> list[int]:
        async def one() -> int:
            client = await connect(port)
            entry = b"\x40" + encode_integer(5, 7) + b"x-pad" + encode_integer(4000, 7)
            client.send(h2.frame(h2.HEADERS, h2.END_HEADERS, 1, entry + b"v" * 4000))
            # 200 bytes that decode to 800 kB, within the old 1 MiB limit; on 40 open streams
            block = encode_literal(":path", INFER) + CALL_LITERALS + b"\xbe" * 200
            client.send(
                b"".join(h2.frame(h2.HEADERS, h2.END_HEADERS, i, block) for i in range(3, 83, 2))
            )
            code, _ = await goaway_code(client)
            return code

        bombs = [asyncio.ensure_future(one()) for _ in range(10)]
        sent.set()
        return await asyncio.gather(*bombs)

    assert set(under_attack(hostile_server, hpack_bombs)) == {h2.ENHANCE_YOUR_CALM}


def test_a_settings_flood(hostile_server) -> None:
    async def settings_flood(port: int, sent: asyncio.Event) -> int:
        client = await connect(port)
        entries = struct.pack(">HL", h2.SETTINGS_INITIAL_WINDOW_SIZE, 65_535) * 2730
        client.send(h2.frame(h2.SETTINGS, 0, 0, entries[:16_380]) * 100)
        client.send(h2.frame(h2.SETTINGS, 0, 0, b"") * 1000)
        sent.set()
        code, _ = await goaway_code(client)
        return code

    assert under_attack(hostile_server, settings_flood) == h2.ENHANCE_YOUR_CALM


def test_streams_beyond_the_maximum_are_refused(hostile_server) -> None:
    async def open_many_streams(port: int, sent: asyncio.Event) -> dict[int, int]:
        client = await connect(port)
        block = client.headers_block(INFER)
        # streams that never send their message: each holds its place until the end
        opening = (h2.frame(h2.HEADERS, h2.END_HEADERS, i, block) for i in range(1, 301, 2))
        client.send(b"".join(opening))
        sent.set()
        resets: dict[int, int] = {}
        while len(resets) < 50:
            frame_type, _, stream_id, payload = await client.read_frame(10)
            if frame_type == h2.RST_STREAM:
                resets[stream_id] = struct.unpack(">L", payload)[0]
        await client.close()
        return resets

    resets = under_attack(hostile_server, open_many_streams)
    assert set(resets) == set(range(201, 301, 2))  # the first 100 stay open
    assert set(resets.values()) == {h2.REFUSED_STREAM}


def test_rapid_reset(hostile_server) -> None:
    async def rapid_reset(port: int, sent: asyncio.Event) -> tuple[int, bytes]:
        client = await connect(port)
        request = message(infer_request("identity_uint8", np.zeros((1, 16), np.uint8)))
        block = client.headers_block(INFER)
        cancel = struct.pack(">L", h2.CANCEL)
        client.send(
            b"".join(
                h2.frame(h2.HEADERS, h2.END_HEADERS, i, block)
                + h2.frame(h2.DATA, h2.END_STREAM, i, request)
                + h2.frame(h2.RST_STREAM, 0, i, cancel)
                for i in range(1, 10_001, 2)
            )
        )
        sent.set()
        return await goaway_code(client)

    code, reason = under_attack(hostile_server, rapid_reset)
    assert code == h2.ENHANCE_YOUR_CALM and b"reset or refused" in reason


def test_a_ping_flood(hostile_server) -> None:
    async def ping_flood(port: int, sent: asyncio.Event) -> tuple[int, bytes]:
        client = await connect(port)
        client.send(h2.frame(h2.PING, 0, 0, b"12345678") * 50_000)
        sent.set()
        return await goaway_code(client)

    assert under_attack(hostile_server, ping_flood) == (h2.ENHANCE_YOUR_CALM, b"too_many_pings")


def test_a_huge_frame_and_a_frame_left_unfinished(hostile_server) -> None:
    async def huge_and_partial_frames(port: int, sent: asyncio.Event) -> list[int]:
        huge = await connect(port)
        huge.send(h2.frame_header(h2.DATA, 0, 1, (1 << 24) - 1) + b"x" * 1000)
        partial = await connect(port)
        partial.send(h2.frame_header(h2.PING, 0, 0, 8) + b"1234")  # never finished
        sent.set()
        return [(await goaway_code(huge))[0], (await goaway_code(partial))[0]]

    codes = under_attack(hostile_server, huge_and_partial_frames)
    assert codes == [h2.FRAME_SIZE_ERROR, h2.PROTOCOL_ERROR]


def test_silent_connections_are_closed_at_the_handshake_timeout(hostile_server) -> None:
    async def silent_connections(port: int, sent: asyncio.Event) -> int:
        opened = [await asyncio.open_connection("127.0.0.1", port) for _ in range(200)]
        sent.set()
        closed = 0
        for reader, writer in opened:
            await asyncio.wait_for(reader.read(), 10)  # until the server closes it
            closed += 1
            writer.close()
        return closed

    assert under_attack(hostile_server, silent_connections) == 200


def test_messages_over_the_maximum_and_compression_bombs(hostile_server) -> None:
    bomb = gzip.compress(b"\x00" * (256 * MIB))  # 256 MiB in about 250 kB

    async def big_messages(port: int, sent: asyncio.Event) -> list[tuple[str, str]]:
        client = await connect(port)
        block = client.headers_block(INFER)
        claimed = b"\x00" + (1 << 30).to_bytes(4, "big") + b"x" * 100  # a 1 GiB prefix
        client.send(h2.frame(h2.HEADERS, h2.END_HEADERS, 1, block))
        client.send_data(1, claimed, end_stream=False)
        sent.set()
        too_big = status(await client.answer(1))
        client.call(3, INFER, message(bomb, compressed=True), (("grpc-encoding", "gzip"),))
        bombed = status(await client.answer(3))
        await client.close()
        return [too_big, bombed]

    too_big, bombed = under_attack(hostile_server, big_messages)
    assert too_big == ("8", f"Received message larger than max ({1 << 30} vs. {MAX_MESSAGE})")
    inflated = f"more than {MAX_MESSAGE} once inflated"
    assert bombed == ("8", f"Received message larger than max ({inflated} vs. {MAX_MESSAGE})")


def test_many_messages_left_unfinished(hostile_server) -> None:
    async def unfinished_messages(port: int, sent: asyncio.Event) -> list[tuple[str, str]]:
        client = await connect(port)
        block = client.headers_block(INFER)
        most = b"\x00" + (MAX_MESSAGE - 1000).to_bytes(4, "big") + b"x" * (MAX_MESSAGE - 2000)
        for stream_id in range(1, 61, 2):  # 30 calls, 4 MiB each, 120 MiB in all unbounded
            client.send(h2.frame(h2.HEADERS, h2.END_HEADERS, stream_id, block))
            client.send_data(stream_id, most, end_stream=False)
            await client.writer.drain()
        sent.set()
        for stream_id in range(1, 61, 2):  # the end: calls still waiting fail, INTERNAL
            client.send(h2.frame(h2.DATA, h2.END_STREAM, stream_id))
        statuses: dict[int, dict[str, str]] = {}
        while len(statuses) < 30:  # the trailers of every call, in whatever order they come
            frame_type, flags, stream_id, payload = await client.read_frame(10)
            if frame_type == h2.HEADERS and flags & h2.END_STREAM:
                statuses[stream_id] = dict(client.decoder.decode(payload))
        await client.close()
        return [(s["grpc-status"], s.get("grpc-message", "")) for s in statuses.values()]

    answers = under_attack(hostile_server, unfinished_messages)
    exhausted = [a for a in answers if a[0] == "8"]
    assert len(exhausted) >= 26  # at most four calls fit in 16 MiB
    assert "--grpc-max-buffered-input" in exhausted[0][1]


def test_a_client_that_never_reads_its_answers(hostile_server) -> None:
    async def never_read(port: int, sent: asyncio.Event) -> bool:
        client = await non_reading_client(port)
        request = message(infer_request("identity_uint8", np.zeros((1, 256 << 10), np.uint8)))
        dropped = False
        sent.set()
        for stream_id in range(1, 161, 2):  # up to 20 MiB of 256 KiB answers asked for
            client.call(stream_id, INFER, request)
            try:
                await asyncio.wait_for(client.writer.drain(), 0.5)
            except (ConnectionError, OSError):
                dropped = True
                break
            except TimeoutError:
                pass  # the server reads no more: it waits for this client to read
        if not dropped:
            try:
                await asyncio.wait_for(client.reader.read(), 10)  # until the server drops it
                dropped = True
            except (ConnectionError, OSError):
                dropped = True
        client.writer.transport.abort()
        return dropped

    assert under_attack(hostile_server, never_read)


# ---------------------------------------------------------------------------------------
# the flags on the grpcio transport: honoured as channel options, or refused


def test_grpcio_transport_refuses_flags_it_cannot_honour(onnx_repository: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [
            sys.executable, "-m", "triton_core", "serve",
            "--model-repository", str(onnx_repository),
            "--grpc-transport", "grpcio", "--grpc-http2-reset-budget", "5",
        ],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--grpc-http2-reset-budget applies to --grpc-transport http2 only" in done.stderr


def test_grpcio_transport_honours_the_message_size_flag(onnx_repository: Path) -> None:
    from tritonclient.utils import InferenceServerException

    with ServerProcess(
        [onnx_repository], "--grpc-transport", "grpcio", "--grpc-max-message-size", "100000"
    ) as process:
        process.wait_ready()
        client = grpcclient.InferenceServerClient(process.grpc_url)
        try:
            data = np.zeros((1, 200_000), np.uint8)
            inputs = [grpcclient.InferInput("INPUT0", list(data.shape), "UINT8")]
            inputs[0].set_data_from_numpy(data)
            with pytest.raises(InferenceServerException, match="larger than max"):
                client.infer("identity_uint8", inputs)
            small = np.zeros((1, 1000), np.uint8)
            inputs = [grpcclient.InferInput("INPUT0", list(small.shape), "UINT8")]
            inputs[0].set_data_from_numpy(small)
            assert client.infer("identity_uint8", inputs).as_numpy("OUTPUT0").shape == (1, 1000)
        finally:
            client.close()


def test_idle_connections_filling_the_maximum_lock_no_client_out(onnx_repository: Path) -> None:
    """Beyond --grpc-max-connections the connection idle the longest is sent away: a flood of
    idle HTTP/2 connections costs tritonclient nothing, whether it connected before (and
    went idle) or during the flood."""
    cap = 16
    process = ServerProcess([onnx_repository], "--grpc-max-connections", str(cap))
    with process:
        process.wait_ready()
        before = grpcclient.InferenceServerClient(process.grpc_url)
        assert before.is_server_live(client_timeout=5.0)

        async def flood() -> tuple[int, int]:
            clients = [await RawClient.connect(process.grpc_port) for _ in range(2 * cap)]
            try:
                # the oldest were sent away to admit the rest (so the cap was reached)
                code, _ = await goaway_code(clients[0])
                await asyncio.to_thread(others_are_served, process)
                served_again = await asyncio.to_thread(before.is_server_live, client_timeout=5.0)
                return code, served_again
            finally:
                for client in clients[1:]:
                    await client.close()

        code, served_again = asyncio.run(flood())
        before.close()
        assert code == h2.NO_ERROR
        assert served_again
    assert process.process.returncode == 0, process.log()[-4000:]
