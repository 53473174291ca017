"""What the HTTP server stack costs per request, before any inference work.

In one run, the same fixed 181-byte answer to the same 300-byte POST, one keep-alive
connection, one request at a time (c=1) and then 4 connections (c=4): from uvicorn running a
minimal ASGI app (as the HTTP frontend runs, uvloop + httptools), and from a bare asyncio
protocol feeding httptools and writing the answer from its callback. The difference is the
per-request price of uvicorn's ASGI cycle. Results go to docs/benchmarks.md.

    python bench/http_stack.py [--seconds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import platform
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import ROOT, format_table, free_port, replace_section

ANSWER = b"x" * 181
REQUEST = b"POST /v2/models/m/infer HTTP/1.1\r\nHost: bench\r\nContent-Length: 300\r\n\r\n" + (
    b"y" * 300
)


def serve_uvicorn(port: int) -> None:
    import uvicorn

    async def app(scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            return
        await receive()
        headers = [(b"content-type", b"application/octet-stream"), (b"content-length", b"181")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": ANSWER})

    uvicorn.run(
        app, host="127.0.0.1", port=port, loop="uvloop", http="httptools",
        lifespan="off", access_log=False, log_level="error",
    )  # fmt: skip


def serve_bare(port: int) -> None:
    import httptools
    import uvloop

    response = (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: 181\r\n\r\n"
        + ANSWER
    )

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
    stacks = (
        ("uvicorn + minimal ASGI app", serve_uvicorn),
        ("bare httptools protocol", serve_bare),
    )
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
    table = format_table(["server (fixed answer)", "c=1", "c=4"], rows)
    note = (
        f"Same 300-byte POST and 181-byte answer, keep-alive, Python socket clients in separate "
        f"processes, {args.seconds:.0f} s per cell ({os.cpu_count()} CPUs, "
        f"{platform.machine()}, Python {platform.python_version()}). The gap between the rows "
        "is what uvicorn's ASGI cycle adds to every HTTP request before the frontend's own "
        "work; the gRPC frontend, on its own protocol class, does not pay it."
    )
    replace_section(args.output, "http-stack", f"## HTTP server stack\n\n{note}\n\n{table}")
    print(table)


if __name__ == "__main__":
    main()
