"""What the HTTP server stack costs per request, before any inference work.

In one run, the same answer to the same infer POST, one keep-alive connection, one request
at a time (c=1) and then 4 connections (c=4): from a minimal ASGI app that sends a fixed
answer, served by triton-core's HTTP server (its ASGI cycle, the path of every request but
plain infer) and, where uvicorn is installed (``pip install -e '.[bench]'``), by uvicorn; from
a bare asyncio protocol feeding httptools and writing the fixed answer from its callback; and
from triton-core's HTTP frontend as served (its protocol, the infer codec both ways, and a
stand-in server whose ``submit`` returns an answered future). The bare protocol bounds what
any Python HTTP/1.1 server costs; the last row is the frontend's own price per request.
Results go to docs/benchmarks.md.

    python bench/http_stack.py [--seconds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import multiprocessing
import os
import platform
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import orjson

from bench.common import ROOT, format_table, free_port, replace_section
from triton_core.frontends.http.answers import encode_response
from triton_core.types import InferenceResponse, Tensor

# binary tensors both ways, as perf_analyzer and tritonclient send them
_HEADER = orjson.dumps(
    {
        "inputs": [
            {
                "name": "INPUT0",
                "shape": [1, 64],
                "datatype": "FP32",
                "parameters": {"binary_data_size": 256},
            }
        ],
        "parameters": {"binary_data_output": True},
    }
)
INFER_BODY = _HEADER + np.full((1, 64), 0.5, np.float32).tobytes()
REQUEST = (
    b"POST /v2/models/m/infer HTTP/1.1\r\nHost: bench\r\n"
    + f"Content-Length: {len(INFER_BODY)}\r\n".encode()
    + f"Inference-Header-Content-Length: {len(_HEADER)}\r\n\r\n".encode()
    + INFER_BODY
)


def instant_response() -> InferenceResponse:
    output = Tensor("OUTPUT0", "FP32", np.arange(10, dtype=np.float32).reshape(1, 10))
    return InferenceResponse([output], model_name="m", model_version=1)


ANSWER, _ANSWER_HEADERS = encode_response(instant_response(), {}, True)
#: the answer's headers, as the frontend sends them
ANSWER_HEADERS = [
    (name.lower().encode(), value.encode()) for name, value in _ANSWER_HEADERS.items()
] + [(b"content-length", str(len(ANSWER)).encode())]


async def minimal_app(scope, receive, send):  # type: ignore[no-untyped-def]
    if scope["type"] != "http":
        return
    await receive()
    await send({"type": "http.response.start", "status": 200, "headers": ANSWER_HEADERS})
    await send({"type": "http.response.body", "body": ANSWER})


def serve_uvicorn(port: int) -> None:
    import uvicorn

    uvicorn.run(
        minimal_app, host="127.0.0.1", port=port, loop="uvloop", http="httptools",
        lifespan="off", access_log=False, log_level="error",
    )  # fmt: skip


def run_http_server(app, port: int) -> None:  # type: ignore[no-untyped-def]
    """Serve ``app`` with triton-core's HTTP server on uvloop, as the runner does."""
    import uvloop

    from triton_core.frontends.common import listen_socket
    from triton_core.frontends.http.server import HttpServer

    async def main() -> None:
        HttpServer(app).start(listen_socket("127.0.0.1", port, "HTTP"))
        await asyncio.Event().wait()

    uvloop.run(main())


def serve_minimal(port: int) -> None:
    run_http_server(minimal_app, port)


def serve_bare(port: int) -> None:
    import httptools
    import uvloop

    head = b"".join(name + b": " + value + b"\r\n" for name, value in ANSWER_HEADERS)
    response = b"HTTP/1.1 200 OK\r\n" + head + b"\r\n" + ANSWER

    class Bare(asyncio.Protocol):
        def connection_made(self, transport):  # type: ignore[no-untyped-def]
            self.transport = transport
            self.parser = httptools.HttpRequestParser(self)

        def data_received(self, data: bytes) -> None:
            self.parser.feed_data(data)

        def on_message_complete(self) -> None:
            self.transport.write(response)

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Bare, "127.0.0.1", port)
        await server.serve_forever()

    uvloop.run(main())


def serve_frontend(port: int) -> None:
    """triton-core's HTTP frontend as the server runs it, over a model that answers at once."""
    from triton_core.frontends.http.fast_path import create_asgi_app

    class InstantServer:
        def model_is_decoupled(self, name: str, version: int = -1) -> bool:
            return False

        def submit(self, request):  # type: ignore[no-untyped-def]
            future = asyncio.get_running_loop().create_future()
            future.set_result(instant_response())
            return future

    run_http_server(create_asgi_app(InstantServer()), port)  # type: ignore[arg-type]


def client(port: int, seconds: float, results: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    """One connection, closed loop, bounded by time and count."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    latencies = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end and len(latencies) < 2_000_000:
        start = time.perf_counter()
        sock.sendall(REQUEST)
        received = b""
        while not received.endswith(ANSWER):
            chunk = sock.recv(65536)
            if not chunk:
                raise RuntimeError("the server closed the connection")
            received += chunk
        latencies.append(time.perf_counter() - start)
    sock.close()
    results.put(latencies)


def measure(port: int, connections: int, seconds: float) -> tuple[float, float]:
    """(requests per second, p50 microseconds) over ``connections`` client processes."""
    results: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
    clients = [
        multiprocessing.Process(target=client, args=(port, seconds, results))
        for _ in range(connections)
    ]
    for process in clients:
        process.start()
    latencies = sorted(x for _ in clients for x in results.get(timeout=seconds + 60))
    for process in clients:
        process.join()
    return len(latencies) / seconds, latencies[len(latencies) // 2] * 1e6


def wait_for(port: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on port {port}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args()
    rows = []
    stacks = [
        ("triton-core HTTP server + minimal ASGI app", serve_minimal),
        ("bare httptools protocol", serve_bare),
        ("triton-core HTTP frontend, instant model", serve_frontend),
    ]
    if importlib.util.find_spec("uvicorn") is not None:  # the baseline, where installed
        stacks.insert(0, ("uvicorn + minimal ASGI app", serve_uvicorn))
    for label, target in stacks:
        port = free_port()
        server = multiprocessing.Process(target=target, args=(port,), daemon=True)
        server.start()
        try:
            wait_for(port)
            measure(port, 1, 1.0)  # warm-up
            cells = []
            for connections in (1, 4):
                rate, p50 = measure(port, connections, args.seconds)
                cells.append(f"{rate:,.0f}/s, p50 {p50:,.0f} us")
            rows.append([label, *cells])
        finally:
            server.terminate()
            server.join()
    table = format_table(["server", "c=1", "c=4"], rows)
    note = (
        f"Same {len(REQUEST)}-byte infer POST and {len(ANSWER)}-byte answer (binary tensors both "
        "ways, as perf_analyzer sends them), keep-alive, "
        f"Python socket clients in separate processes, {args.seconds:.0f} s per cell "
        f"({os.cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()}). "
        "The ASGI rows and the bare httptools protocol send a fixed answer: an ASGI cycle "
        "(uvicorn's, where installed, and triton-core's, which serves every request but plain "
        "infer) against no cycle at all. The frontend row is the real thing minus the model: "
        "its protocol answers infer from the parser's callbacks (no ASGI cycle), decodes the "
        "body, hands the request to a stand-in server whose submit returns an answered future, "
        "and encodes the answer."
    )
    replace_section(args.output, "http-stack", f"## HTTP server stack\n\n{note}\n\n{table}")
    print(table)


if __name__ == "__main__":
    main()
