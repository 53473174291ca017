"""``triton-core serve`` shortens the GIL switch interval of the process it serves from."""

from __future__ import annotations

import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest

from triton_core import cli


def test_serve_sets_the_switch_interval_before_serving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[float] = []

    def run(coroutine: Coroutine[Any, Any, int]) -> int:
        coroutine.close()  # not served: only the interval it would be served with matters
        seen.append(sys.getswitchinterval())
        return 0

    monkeypatch.setattr(cli, "run_on_event_loop", run)
    before = sys.getswitchinterval()
    try:
        assert cli.main(["serve", "--model-repository", str(tmp_path)]) == 0
    finally:
        sys.setswitchinterval(before)
    assert seen == [cli.SWITCH_INTERVAL_SECS]
    assert before > cli.SWITCH_INTERVAL_SECS
