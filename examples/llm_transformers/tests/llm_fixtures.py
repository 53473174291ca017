"""What the example's tests share: its modules loaded by path, the model's step log."""

from __future__ import annotations

import importlib.util
import json
import time
from pathlib import Path
from types import ModuleType

EXAMPLE = Path(__file__).resolve().parents[1]


def load(name: str, path: Path) -> ModuleType:
    """A module of the example by its file (its names are too plain to import by)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build_model = load("llm_transformers_build_model", EXAMPLE / "build_model.py")

MODEL = build_model.MODEL_NAME


class StepLog:
    """The model's step log (one JSON line per decoding step), read as the model writes it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def records(self) -> list[dict]:
        if not self.path.exists():
            return []
        lines = self.path.read_text().splitlines()
        # the last line may be half written
        return [json.loads(line) for line in lines if line.endswith("}")]

    def wait_for(self, predicate, timeout: float = 60.0) -> list[dict]:
        """The records once ``predicate(records)`` holds (the model wrote what is awaited)."""
        deadline = time.monotonic() + timeout
        while True:
            records = self.records()
            if predicate(records):
                return records
            if time.monotonic() > deadline:
                raise AssertionError(f"the step log never showed it; last: {records[-5:]}")
            time.sleep(0.05)
