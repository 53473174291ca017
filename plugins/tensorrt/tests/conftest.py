"""Fixtures for the TensorRT backend tests: recorded engine descriptions and configs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from google.protobuf import text_format
from triton_core_tensorrt.description import EngineDescription

from triton_core import ModelConfig

FIXTURES = Path(__file__).parent / "fixtures"


def load_description(name: str) -> EngineDescription:
    return EngineDescription.from_json((FIXTURES / f"{name}.json").read_text())


def parse_config(text: str = "", name: str = "m") -> ModelConfig:
    config = text_format.Parse(text, ModelConfig())
    config.name = config.name or name
    return config


@pytest.fixture
def describe() -> Callable[[str], EngineDescription]:
    """``describe("convnet")`` -> the recorded description in fixtures/convnet.json."""
    return load_description


@pytest.fixture
def make_config() -> Callable[..., ModelConfig]:
    """``make_config(pbtxt_text)`` -> a ModelConfig named ``m``."""
    return parse_config
