"""Hostile HTTP/1.1 clients against the real server process.

For each attack: the attacker gets the RFC answer (408, 413, 414, 431, 400, 503) or the
connection closed; other clients, HTTP and gRPC, keep being answered within 2 s while it
lasts; and the server's resident memory grows by less than 100 MiB.
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.support import ServerProcess, serve_until_done

HEADER_TIMEOUT = 2.0
BODY_TIMEOUT = 2.0
MAX_CONNECTIONS = 64
PROBE_TIMEOUT = 2.0
MAX_RSS_GROWTH = 100 << 20


@pytest.fixture(scope="module")
def server(onnx_repository: Path) -> Iterator[ServerProcess]:
    process = ServerProcess(
        [onnx_repository],
        "--http-header-timeout-secs", str(HEADER_TIMEOUT),
        "--http-body-timeout-secs", str(BODY_TIMEOUT),
        "--http-max-connections", str(MAX_CONNECTIONS),
    )  # fmt: skip
    yield from serve_until_done(process)


# ------------------------------------------------------------------------------------------
# the other clients, and the server's memory


class Bystanders:
    """An HTTP and a gRPC client of the simple model, each answered within 2 s or failing."""

    def __init__(self, server: ServerProcess) -> None:
        self.http = httpclient.InferenceServerClient(
            server.http_url, connection_timeout=PROBE_TIMEOUT, network_timeout=PROBE_TIMEOUT
        )
        self.grpc = grpcclient.InferenceServerClient(server.grpc_url)
        self.data = np.arange(16, dtype=np.int32).reshape(1, 16)
        self.answered = 0

    def ask(self) -> None:
        for module, client, timeout in (
            (httpclient, self.http, {}),
            (grpcclient, self.grpc, {"client_timeout": PROBE_TIMEOUT}),
        ):
            inputs = [module.InferInput(f"INPUT{i}", [1, 16], "INT32") for i in range(2)]
            for tensor in inputs:
                tensor.set_data_from_numpy(self.data)
            result = client.infer("simple", inputs, **timeout)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), self.data * 2)
        self.answered += 1

    def ask_while(self, attack: Callable[[], object], limit: float = 60.0) -> object:
        """Run ``attack`` in a thread, asking again and again until it ends; its result.

        The clients connect before the attack starts, as clients already served would.
        """
        outcome: dict[str, object] = {}

        def run() -> None:
            try:
                outcome["result"] = attack()
            except BaseException as exc:
                outcome["error"] = exc

        self.ask()
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        deadline = time.monotonic() + limit
        try:
            while thread.is_alive() and time.monotonic() < deadline:
                self.ask()
                thread.join(0.1)
        finally:  # the attack ends (its sockets closed) before the next test
            thread.join(max(0.0, deadline - time.monotonic()))
        assert not thread.is_alive(), "the attack did not end"
        self.ask()
        if "error" in outcome:
            raise outcome["error"]  # type: ignore[misc]
        return outcome["result"]

    def close(self) -> None:
        self.http.close()
        self.grpc.close()


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@contextmanager
def memory_bounded(server: ServerProcess) -> Iterator[None]:
    """The server's peak RSS, sampled every 20 ms through the block, grows < 100 MiB."""
    pid = server.process.pid
    before = rss(pid)
    peak = before
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.02):
            peak = max(peak, rss(pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield
    finally:
        done.set()
        sampler.join(5)
    peak = max(peak, rss(pid))
    print(f"server RSS {before >> 20} MiB -> peak {peak >> 20} MiB")
    assert peak - before < MAX_RSS_GROWTH, (before, peak)


@pytest.fixture
def bystanders(server: ServerProcess) -> Iterator[Bystanders]:
    clients = Bystanders(server)
    yield clients
    clients.close()


# ------------------------------------------------------------------------------------------
# raw attackers


def connect(server: ServerProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.http_port), timeout=10)


def read_answer(source: socket.socket | BinaryIO, limit: float = 10.0) -> tuple[int, bytes] | None:
    """(status, body) of the next answer, or None when the server reset the connection.

    Pipelined answers are read from one buffered ``sock.makefile("rb")``, passed each time.
    """
    if isinstance(source, socket.socket):
        source.settimeout(limit)
        source = source.makefile("rb")
    try:
        status_line = source.readline()
        if not status_line:
            return None
        headers = {}
        while (line := source.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        body = source.read(int(headers.get("content-length", "0")))
    except ConnectionResetError:
        return None
    return int(status_line.split()[1]), body


def assert_refused(answer: tuple[int, bytes] | None, status: int, flag: str) -> None:
    """The RFC answer naming the limit (it is read before the connection closes, even by
    an attacker still sending: the server drops what arrives for a while)."""
    assert answer is not None, "reset before the answer"
    assert answer[0] == status, answer
    assert flag in json.loads(answer[1])["error"], answer


def send_until_answered(sock: socket.socket, chunks: Iterator[bytes]) -> int:
    """Send until the server answers or stops reading; the bytes it took."""
    sent = 0
    for chunk in chunks:
        readable, _, _ = select.select([sock], [], [], 0)
        if readable:
            break
        try:
            sock.sendall(chunk)
        except OSError:
            break
        sent += len(chunk)
    return sent


def infer_head(length: int, path: str = "/v2/models/simple/infer", extra: str = "") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n{extra}\r\n").encode()


def small_infer_body() -> bytes:
    inputs = [
        {"name": f"INPUT{i}", "datatype": "INT32", "shape": [1, 16], "data": list(range(16))}
        for i in range(2)
    ]
    return json.dumps({"inputs": inputs}).encode()


# ------------------------------------------------------------------------------------------
# the attacks


def test_slowloris_headers_get_408(server: ServerProcess, bystanders: Bystanders) -> None:
    """Thirty connections drip their headers a byte every 0.2 s: each gets 408 at the
    header deadline, however many bytes keep arriving."""

    def attack() -> list[tuple[int, bytes] | None]:
        socks = [connect(server) for _ in range(30)]
        answers: dict[int, tuple[int, bytes] | None] = {}
        head = b"POST /v2/models/simple/infer HTTP/1.1\r\nX-Slow: " + b"a" * 1000
        started = time.monotonic()
        for position in range(len(head)):
            if len(answers) == len(socks) or time.monotonic() - started > 20:
                break
            for index, sock in enumerate(socks):
                if index in answers:
                    continue
                if select.select([sock], [], [], 0)[0]:
                    answers[index] = read_answer(sock)
                    continue
                sock.sendall(head[position : position + 1])
            time.sleep(0.2)
        elapsed = time.monotonic() - started
        for sock in socks:
            sock.close()
        assert elapsed >= HEADER_TIMEOUT * 0.9  # not answered before the deadline
        return [answers.get(i, (0, b"never answered")) for i in range(len(socks))]

    with memory_bounded(server):
        answers = bystanders.ask_while(attack)
    for answer in answers:  # type: ignore[union-attr]
        assert answer is not None
        assert_refused(answer, 408, "--http-header-timeout-secs")


@pytest.mark.parametrize(
    "extra", ["", "Content-Encoding: gzip\r\n"], ids=["fast-path", "falcon-path"]
)
def test_a_stalled_body_gets_408(server: ServerProcess, bystanders: Bystanders, extra: str) -> None:
    def attack() -> tuple[int, bytes] | None:
        with connect(server) as sock:
            sock.sendall(infer_head(1000, extra=extra) + b'{"inputs": [')
            return read_answer(sock)

    with memory_bounded(server):
        answer = bystanders.ask_while(attack)
    assert answer is not None
    assert_refused(answer, 408, "--http-body-timeout-secs")  # type: ignore[arg-type]


def test_huge_headers_get_431_long_before_128_mib(
    server: ServerProcess, bystanders: Bystanders
) -> None:
    def attack() -> tuple[tuple[int, bytes] | None, int]:
        with connect(server) as sock:
            sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nX-Huge: ")
            chunks = (b"h" * 65536 for _ in range(2048))  # 128 MiB
            sent = send_until_answered(sock, chunks)
            return read_answer(sock), sent

    with memory_bounded(server):
        answer, sent = bystanders.ask_while(attack)  # type: ignore[misc]
    assert sent < 16 << 20, sent  # the server stopped reading far before 128 MiB
    assert_refused(answer, 431, "--http-max-header-size")


def test_many_headers_get_431(server: ServerProcess, bystanders: Bystanders) -> None:
    def attack() -> tuple[int, bytes] | None:
        with connect(server) as sock:
            sock.sendall(b"GET /v2/health/live HTTP/1.1\r\n")
            chunks = (
                b"".join(b"X-%d: 1\r\n" % (i * 100 + j) for j in range(100)) for i in range(1000)
            )
            send_until_answered(sock, chunks)
            return read_answer(sock)

    with memory_bounded(server):
        answer = bystanders.ask_while(attack)
    assert_refused(answer, 431, "--http-max-header-")  # type: ignore[arg-type]


@pytest.mark.parametrize("expect", [False, True], ids=["plain", "expect-100-continue"])
@pytest.mark.parametrize("path", ["/v2/models/simple/infer", "/v2/repository/index"])
def test_a_huge_content_length_gets_413_before_any_body(
    server: ServerProcess, bystanders: Bystanders, path: str, expect: bool
) -> None:
    extra = "Expect: 100-continue\r\n" if expect else ""

    def attack() -> tuple[int, bytes] | None:
        with connect(server) as sock:
            sock.sendall(infer_head(10**12, path, extra))
            return read_answer(sock)  # the first answer: 413, not 100 Continue

    with memory_bounded(server):
        answer = bystanders.ask_while(attack)
    assert answer is not None
    assert_refused(answer, 413, "--http-max-input-size")  # type: ignore[arg-type]


def post(
    server: ServerProcess, body: bytes, path: str = "/v2/models/simple/infer"
) -> tuple[int, str]:
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=60)
    try:
        connection.request("POST", path, body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read()).get("error", "")
    finally:
        connection.close()


def test_a_million_inputs_in_json_get_400_and_stall_no_one(
    server: ServerProcess, bystanders: Bystanders
) -> None:
    body = b'{"inputs":[' + b",".join([b'{"name":"i","data":[1]}'] * 10**6) + b"]}"

    with memory_bounded(server):
        status, error = bystanders.ask_while(lambda: post(server, body))  # type: ignore[misc]
    assert status == 400 and "--http-max-json-elements" in error, error


def test_many_inputs_under_the_element_cap_are_checked_against_the_model_first(
    server: ServerProcess, bystanders: Bystanders
) -> None:
    item = b'{"name":"INPUT%d","datatype":"INT32","shape":[1,16],"data":[1]}'
    body = b'{"inputs":[' + b",".join(item % i for i in range(30_000)) + b"]}"  # 210000

    with memory_bounded(server):
        status, error = bystanders.ask_while(lambda: post(server, body))  # type: ignore[misc]
    assert status == 400
    assert error == "expected at most 2 inputs but got 30000 inputs for model 'simple'"


def test_concurrent_json_bodies_at_the_element_cap_stall_no_one(
    server: ServerProcess, bystanders: Bystanders
) -> None:
    """Eight clients at once, each with a JSON body just under the element cap: decoded in
    threads, parsed in pieces of the loop's time that leave other clients answered."""
    data = b",".join([b"1"] * 250_000)
    head = b'{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":['
    body = head + data + b"]}]}"

    def attack() -> list[tuple[int, str]]:
        answers: list[tuple[int, str]] = []
        threads = [
            threading.Thread(target=lambda: answers.append(post(server, body))) for _ in range(8)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        return answers

    with memory_bounded(server):
        answers = bystanders.ask_while(attack)
    assert len(answers) == 8  # type: ignore[arg-type]
    for status, error in answers:  # type: ignore[union-attr]
        assert status == 400 and "'data' has 250000" in error, error


@pytest.mark.parametrize("depth", [100, 1000, 100_000])
def test_deeply_nested_data_is_a_400(
    server: ServerProcess, bystanders: Bystanders, depth: int
) -> None:
    head = b'{"inputs":[{"name":"INPUT0","datatype":"INT32","shape":[1,16],"data":'
    body = head + b"[" * depth + b"1" + b"]" * depth + b"}]}"

    with memory_bounded(server):
        status, error = bystanders.ask_while(lambda: post(server, body))  # type: ignore[misc]
    assert status == 400
    assert "--http-max-json-depth" in error or "depth limit exceeded" in error, error


def test_many_distinct_urls_with_long_queries_keep_memory_bounded(
    server: ServerProcess, bystanders: Bystanders
) -> None:
    body = small_infer_body()

    def attack() -> int:
        connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=10)
        answered = 0
        try:
            for i in range(3000):
                url = f"/v2/models/simple/infer?n={i}&pad={'x' * 15000}"
                connection.request("POST", url, body)
                response = connection.getresponse()
                response.read()
                answered += response.status == 200
        finally:
            connection.close()
        return answered

    with memory_bounded(server):
        assert bystanders.ask_while(attack) == 3000


def test_a_connection_flood_sheds_the_connections_idle_longest(
    server: ServerProcess, bystanders: Bystanders
) -> None:
    """Beyond the cap, each new connection closes the one idle the longest: the flood's own
    silent connections go, the clients being served go on, none is refused."""

    def attack() -> list[tuple[int, bytes] | None]:
        socks = [connect(server) for _ in range(3 * MAX_CONNECTIONS)]
        try:
            return [read_answer(sock, 15) for sock in socks]
        finally:
            for sock in socks:
                sock.close()

    with memory_bounded(server):
        answers = bystanders.ask_while(attack)
    statuses = [answer[0] if answer else None for answer in answers]  # type: ignore[union-attr]
    assert statuses.count(None) >= 2 * MAX_CONNECTIONS - 2  # closed to make room
    assert statuses.count(408) <= MAX_CONNECTIONS  # the last ones sent nothing in time
    assert set(statuses) <= {None, 408}


def test_a_client_idle_between_requests_is_served_while_idle_connections_fill_the_cap(
    server: ServerProcess, bystanders: Bystanders
) -> None:
    """tritonclient's keep-alive connection may be the one closed to make room: it connects
    again and is served, rather than refused with 503 while the flood is held."""
    bystanders.ask()  # connected, then idle while the flood arrives
    flood = [connect(server) for _ in range(2 * MAX_CONNECTIONS)]
    try:
        # the oldest of the flood were closed to make room for the rest: the cap was reached
        assert read_answer(flood[0], 15) is None
        for _ in range(5):
            bystanders.ask()
    finally:
        for sock in flood:
            sock.close()


def test_a_client_that_reads_no_answers_is_read_no_more(
    server: ServerProcess, bystanders: Bystanders
) -> None:
    """Pipelined requests from a client that never reads: the server stops reading them
    once its answers back up, and closes the connection after the body timeout."""
    values = list(range(16))
    inputs = [{"name": f"INPUT{i}", "datatype": "INT32", "shape": [1, 16], "data": values}
              for i in range(2)]  # fmt: skip
    body = json.dumps({"inputs": inputs, "parameters": {"pad": "x" * 8000}}).encode()
    request = infer_head(len(body)) + body

    def attack() -> int:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", server.http_port))
        sock.settimeout(1.0)
        sent = 0
        try:
            for _ in range(20000):  # 160 MB of requests; never a byte read
                sock.sendall(request)
                sent += 1
        except OSError:  # the server stopped reading (timeout), then closed
            pass
        finally:
            sock.close()
        return sent

    with memory_bounded(server):
        sent = bystanders.ask_while(attack)
    assert sent < 20000  # not all read: the server stopped taking requests


def test_what_already_held_still_holds(server: ServerProcess) -> None:
    """Smuggling attempts are refused and pipelined requests answered in order."""
    body = small_infer_body()
    with connect(server) as sock:
        sock.sendall(
            b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
        )
        answer = read_answer(sock)
        assert answer is None or answer[0] == 400
    with connect(server) as sock:
        sock.sendall(
            b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
            b"Content-Length: 5\r\n\r\nabcde"
        )
        answer = read_answer(sock)
        assert answer is None or answer[0] == 400
    with connect(server) as sock:
        sock.sendall(infer_head(len(body)) + body + b"GET /v2/health/live HTTP/1.1\r\n\r\n")
        stream = sock.makefile("rb")
        first, second = read_answer(stream), read_answer(stream)
        assert first is not None and first[0] == 200 and b"OUTPUT0" in first[1]
        assert second is not None and second == (200, b"")


def test_the_metrics_endpoint_has_the_same_deadlines(server: ServerProcess) -> None:
    with socket.create_connection(("127.0.0.1", server.metrics_port), timeout=10) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # and never the end
        answer = read_answer(sock)
    assert answer is not None
    assert_refused(answer, 408, "--http-header-timeout-secs")
    with socket.create_connection(("127.0.0.1", server.metrics_port), timeout=10) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\n" + b"X-Many: 1\r\n" * 200 + b"\r\n")
        answer = read_answer(sock)
    assert_refused(answer, 431, "--http-max-header-count")


def test_a_websocket_upgrade_is_answered_as_plain_http(server: ServerProcess) -> None:
    # Triton speaks no WebSocket: whatever WebSocket library is installed, the request is answered
    # as HTTP, never switched to another protocol (101)
    with connect(server) as sock:
        sock.sendall(
            b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n"
            b"Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        )
        answer = read_answer(sock)
    assert answer is not None and answer[0] == 200, answer
