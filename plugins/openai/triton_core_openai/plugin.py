"""The OpenAI-compatible frontend as a triton-core plugin: its ``serve`` flags (named as in
Triton's ``python/openai/openai_frontend/main.py``) and the frontend, served on its own port
in the same process as the KServe HTTP and gRPC frontends.

    triton-core serve --model-repository ./models --openai-port 9000 --tokenizer ./tok

The frontend is on only when ``--openai-port`` is given (Triton's is always on, on 9000).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from triton_core_openai.app import Gate, JsonLimits, Restrictions, create_app
from triton_core_openai.engine import CONVENTIONS
from triton_core_openai.errors import refusal_body
from triton_core_openai.service import OpenAIService, ServiceSettings
from triton_core_openai.tools import DEFAULT_MAX_TOOL_CALL_PARSE_BYTES, PARSERS

from triton_core import (
    Endpoint,
    FrontendRegistry,
    FrontendSettings,
    HttpEndpointFrontend,
    ServerAPI,
    hookimpl,
)

if TYPE_CHECKING:
    from triton_core_openai.app import ASGIApp

logger = logging.getLogger("triton_core_openai")

#: the core's JSON limits when its flags are absent (in-process)
_DEFAULT_JSON_ELEMENTS = 1 << 18
_DEFAULT_JSON_DEPTH = 32


class OpenAIFrontend(HttpEndpointFrontend):
    """``/v1/...`` on ``--openai-address``:``--openai-port``, on the project's HTTP/1.1
    protocol with every limit of the KServe HTTP port."""

    service = "OpenAI-Compatible HTTPService"

    def __init__(
        self,
        options: Any,
        endpoint: Endpoint,
        settings: ServiceSettings,
        restricted: list[list[str]] | None,
        api_key: str | None,
        json_limits: JsonLimits,
    ) -> None:
        super().__init__(options, endpoint)
        self.settings = settings
        self.restricted = restricted
        self.restrictions = Restrictions(None)
        self.api_key = api_key
        self.json_limits = json_limits
        self.openai: OpenAIService | None = None

    def check(self) -> None:
        if self.settings.default_max_tokens < 0:
            raise ValueError("--default-max-tokens must be 0 or more")
        if self.settings.max_tool_call_parse_bytes <= 0:
            raise ValueError("--max-tool-call-parse-bytes must be greater than 0")
        if self.api_key is not None and not self.api_key:
            raise ValueError("--openai-api-key must not be empty")
        self.restrictions = Restrictions(self.restricted)  # ValueError names the API
        for flag, path in (
            ("--tokenizer", self.settings.tokenizer),
            ("--chat-template", self.settings.chat_template),
        ):
            if path is not None and not Path(path).exists():
                raise ValueError(f"{flag} {path}: no such file or folder")

    def error_body(self, status: int, message: str) -> bytes:
        return refusal_body(status, message)

    def build_app(self, server: ServerAPI) -> ASGIApp:
        self.openai = OpenAIService(server, self.settings)
        self.openai.load()  # the tokenizer: a ValueError stops the server, naming the flag
        if self.restrictions.summary():
            logger.info("OpenAI API restrictions enabled: %s", self.restrictions.summary())
        app = create_app(self.openai, self.json_limits)
        return Gate(app, self.metrics_app(server), self.restrictions, self.api_key)  # type: ignore[arg-type]


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text}")
    return value


@hookimpl
def triton_add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("OpenAI-compatible frontend (plugin triton-core-openai)")
    group.add_argument(
        "--openai-port", type=int, default=None, help="serve the OpenAI API here (off when absent)"
    )
    group.add_argument("--openai-address", default="0.0.0.0", help="its address")
    group.add_argument(
        "--tokenizer",
        default=None,
        metavar="PATH",
        help="a local tokenizer folder (tokenizer.json, tokenizer_config.json) whose chat "
        "template /v1/chat/completions applies; nothing is downloaded",
    )
    group.add_argument(
        "--chat-template", default=None, metavar="FILE", help="a Jinja chat template to use instead"
    )
    group.add_argument(
        "--backend",
        choices=CONVENTIONS,
        default=None,
        help="the OpenAI frontend's request format for every model (default: vllm for models "
        "of the vllm backend, tensorrtllm for the others)",
    )
    group.add_argument("--tool-call-parser", choices=PARSERS, default=None)
    group.add_argument(
        "--max-tool-call-parse-bytes",
        type=_positive,
        default=DEFAULT_MAX_TOOL_CALL_PARSE_BYTES,
        help="longest streamed tool call held for parsing; past it the answer ends with "
        "finish_reason 'length' and the generation is cancelled",
    )
    group.add_argument(
        "--default-max-tokens", type=int, default=16, help="max_tokens when a request has none"
    )
    group.add_argument(
        "--lora-separator", default=None, help="'<model><separator><lora>' names a LoRA"
    )
    group.add_argument(
        "--openai-restricted-api",
        nargs=3,
        action="append",
        default=None,
        metavar=("APIS", "HEADER", "VALUE"),
        help="restrict API groups (inference, model-repository, metrics, health; comma-"
        "separated) to requests with HEADER: VALUE (repeatable)",
    )
    group.add_argument(
        "--openai-api-key",
        default=None,
        help="require 'Authorization: Bearer <key>' on every /v1 route",
    )


def _create(settings: FrontendSettings) -> OpenAIFrontend | None:
    port = settings.argument("openai_port")
    if port is None:
        return None
    service = ServiceSettings(
        tokenizer=settings.argument("tokenizer"),
        chat_template=settings.argument("chat_template"),
        tool_call_parser=settings.argument("tool_call_parser"),
        max_tool_call_parse_bytes=settings.argument(
            "max_tool_call_parse_bytes", DEFAULT_MAX_TOOL_CALL_PARSE_BYTES
        ),
        default_max_tokens=settings.argument("default_max_tokens", 16),
        lora_separator=settings.argument("lora_separator"),
        backend=settings.argument("backend"),
        model_control_mode=settings.argument("model_control_mode", "none"),
    )
    limits = JsonLimits(
        settings.argument("http_max_json_elements", _DEFAULT_JSON_ELEMENTS),
        settings.argument("http_max_json_depth", _DEFAULT_JSON_DEPTH),
    )
    endpoint = Endpoint("OpenAI", settings.argument("openai_address", "0.0.0.0"), port)
    return OpenAIFrontend(
        settings.options,
        endpoint,
        service,
        settings.argument("openai_restricted_api"),
        settings.argument("openai_api_key"),
        limits,
    )


@hookimpl
def triton_register_frontends(registry: FrontendRegistry) -> None:
    registry.add("openai", _create)
