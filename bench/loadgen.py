"""A lean closed-loop load generator for Triton's HTTP and gRPC protocols.

Requests are built once with tritonclient's own encoders (so the wire format is the real
client's) and then replayed: the generator does as little Python work per request as possible,
so on a small machine it leaves the CPU to the server under test. Every loop is bounded by a
request count and a duration.

Run as a process: ``python bench/loadgen.py --protocol grpc --url 127.0.0.1:8001 --model mlp
--concurrency 4 --seconds 5`` prints one JSON line of results.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

import numpy as np

#: hard bound on requests per measurement, whatever the duration
MAX_REQUESTS = 2_000_000


def http_request_bytes(host: str, model: str, inputs: dict[str, np.ndarray], binary: bool) -> bytes:
    import tritonclient.http as httpclient
    from tritonclient.utils import np_to_triton_dtype

    tensors = []
    for name, array in inputs.items():
        tensor = httpclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array, binary_data=binary)
        tensors.append(tensor)
    body, json_size = httpclient.InferenceServerClient.generate_request_body(
        tensors, outputs=None, request_id="", sequence_id=0, sequence_start=False,
        sequence_end=False, priority=0, timeout=None, parameters=None,
    )  # fmt: skip
    if not binary:
        # tritonclient asks for binary outputs unless told otherwise; a JSON run wants JSON.
        body = body.replace(b'"binary_data_output":true', b'"binary_data_output":false')
    headers = [
        f"POST /v2/models/{model}/infer HTTP/1.1",
        f"Host: {host}",
        f"Content-Length: {len(body)}",
        "Content-Type: application/octet-stream",
    ]
    if json_size is not None:
        headers.append(f"Inference-Header-Content-Length: {json_size}")
    return ("\r\n".join(headers) + "\r\n\r\n").encode() + body


async def _http_worker(host, port, payload, deadline, latencies, counter):  # type: ignore[no-untyped-def]
    reader, writer = await asyncio.open_connection(host, port)
    perf = time.perf_counter
    try:
        while counter[0] < MAX_REQUESTS:
            start = perf()
            if start >= deadline:
                break
            writer.write(payload)
            head = await reader.readuntil(b"\r\n\r\n")
            status = head[9:12]
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
                    break
            await reader.readexactly(length)
            if status != b"200":
                raise RuntimeError(f"HTTP {status.decode()} from the server")
            latencies.append(perf() - start)
            counter[0] += 1
    finally:
        writer.close()


def grpc_request_bytes(model: str, inputs: dict[str, np.ndarray]) -> bytes:
    import tritonclient.grpc as grpcclient
    from tritonclient.grpc import service_pb2
    from tritonclient.utils import np_to_triton_dtype

    request = service_pb2.ModelInferRequest(model_name=model)
    for name, array in inputs.items():
        tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
        tensor.set_data_from_numpy(array)
        request.inputs.append(tensor._get_tensor())
        request.raw_input_contents.append(tensor._get_content())
    return request.SerializeToString()


async def _grpc_worker(call, payload, deadline, latencies, counter):  # type: ignore[no-untyped-def]
    perf = time.perf_counter
    while counter[0] < MAX_REQUESTS:
        start = perf()
        if start >= deadline:
            break
        await call(payload)
        latencies.append(perf() - start)
        counter[0] += 1


async def measure(
    protocol: str, url: str, model: str, inputs: dict[str, np.ndarray], concurrency: int,
    seconds: float, warmup: float = 1.0,
) -> dict:  # fmt: skip
    """Closed loop: ``concurrency`` clients each send a request as soon as the last returns."""
    host, port = url.rsplit(":", 1)
    channel = None
    if protocol == "grpc":
        import grpc

        channel = grpc.aio.insecure_channel(url)
        call = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer",
            request_serializer=None,
            response_deserializer=None,
        )
        payload = grpc_request_bytes(model, inputs)

        def worker(deadline, latencies, counter):  # type: ignore[no-untyped-def]
            return _grpc_worker(call, payload, deadline, latencies, counter)
    else:
        payload = http_request_bytes(url, model, inputs, binary=protocol == "http-binary")

        def worker(deadline, latencies, counter):  # type: ignore[no-untyped-def]
            return _http_worker(host, int(port), payload, deadline, latencies, counter)

    try:
        warm: list[float] = []
        await asyncio.gather(
            *(worker(time.perf_counter() + warmup, warm, [0]) for _ in range(concurrency))
        )
        latencies: list[float] = []
        counter = [0]
        started = time.perf_counter()
        await asyncio.gather(
            *(worker(started + seconds, latencies, counter) for _ in range(concurrency))
        )
        elapsed = time.perf_counter() - started
    finally:
        if channel is not None:
            await channel.close()
    return summarize(latencies, elapsed)


def summarize(latencies: list[float], elapsed: float) -> dict:
    ordered = sorted(latencies)
    if not ordered:
        return {"throughput": 0.0, "p50_us": 0.0, "p99_us": 0.0, "count": 0}

    def percentile(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1e6

    return {
        "throughput": len(ordered) / elapsed,
        "p50_us": percentile(0.5),
        "p99_us": percentile(0.99),
        "mean_us": statistics.fmean(ordered) * 1e6,
        "count": len(ordered),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--protocol", choices=["http-json", "http-binary", "grpc"], required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--input", action="append", required=True, metavar="NAME:DTYPE:SHAPE",
                        help="e.g. INPUT0:float32:1x64")  # fmt: skip
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    inputs = {}
    for spec in args.input:
        name, dtype, shape = spec.split(":")
        dims = [int(d) for d in shape.split("x")]
        inputs[name] = rng.random(dims).astype(dtype)
    try:
        import uvloop

        runner = uvloop.run
    except ImportError:  # pragma: no cover
        runner = asyncio.run
    result = runner(
        measure(args.protocol, args.url, args.model, inputs, args.concurrency, args.seconds)
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
