"""A blocking client of the NDJSON frontend, for scripts and tests."""

from __future__ import annotations

import json
import socket
from typing import Any

import numpy as np


class LineClient:
    """One connection: :meth:`ask` writes a request line and reads its answer line."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 30.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.lines = self.sock.makefile("rb")

    def send_line(self, line: bytes) -> None:
        self.sock.sendall(line + b"\n")

    def read(self) -> Any:
        """The next answer; None when the server closed the connection."""
        line = self.lines.readline()
        return json.loads(line) if line else None

    def ask(self, body: dict[str, Any]) -> Any:
        self.send_line(json.dumps(body).encode())
        return self.read()

    def close(self) -> None:
        self.lines.close()
        self.sock.close()

    def __enter__(self) -> LineClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def infer_line(
    model: str, inputs: dict[str, tuple[str, np.ndarray]], request_id: str = ""
) -> dict[str, Any]:
    """A request: ``inputs`` maps each name to (datatype, array)."""
    return {
        "id": request_id,
        "model": model,
        "inputs": [
            {
                "name": name,
                "datatype": datatype,
                "shape": list(array.shape),
                "data": array.ravel().tolist(),
            }
            for name, (datatype, array) in inputs.items()
        ],
    }
