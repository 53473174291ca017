"""The SageMaker and Vertex AI endpoints' settings: tritonserver's flags and the environment
variables each platform sets, read and checked before anything loads.

The endpoints themselves are :mod:`triton_core.frontends.http.sagemaker` and
:mod:`triton_core.frontends.http.vertex_ai`.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from triton_core.flags.parsers import parse_port

#: SageMaker's single-model endpoint infers on this model (Triton's default when unset)
SAGEMAKER_DEFAULT_MODEL_ENV: Final = "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"
SAGEMAKER_PING_MODE_ENV: Final = "SAGEMAKER_TRITON_PING_MODE"
SAGEMAKER_INFERENCE_TYPE_ENV: Final = "SAGEMAKER_TRITON_INFERENCE_TYPE"
SAGEMAKER_INFERENCE_TYPES: Final = ("infer", "generate", "generate_stream")
SAGEMAKER_MODEL_ROOT_ENV: Final = "TRITON_CORE_SAGEMAKER_MODEL_ROOT"
_UNSPECIFIED_MODEL: Final = "unspecified_SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"
_PING_MODES: Final = ("ready", "live")


@dataclass(slots=True)
class SageMakerOptions:
    """``--allow-sagemaker`` and the rest (tritonserver's defaults)."""

    allow: bool = False
    #: tritonserver always listens on 0.0.0.0; ``--sagemaker-address`` is beyond Triton
    address: str = "0.0.0.0"
    port: int = 8080
    #: ``--sagemaker-safe-port-range``: the ports every other endpoint must use
    safe_port_range: tuple[int, int] | None = None
    #: ``--sagemaker-thread-count``; None when not given
    thread_count: int | None = None
    #: the model ``/invocations`` runs (``SAGEMAKER_TRITON_DEFAULT_MODEL_NAME``)
    default_model: str = _UNSPECIFIED_MODEL
    #: ``SAGEMAKER_TRITON_PING_MODE``: what ``/ping`` reports, ready or live
    ping_mode: str = "ready"
    #: ``SAGEMAKER_TRITON_INFERENCE_TYPE``: infer, generate or generate_stream
    inference_type: str = "infer"
    #: where SageMaker unpacks multi-model archives (``TRITON_CORE_SAGEMAKER_MODEL_ROOT``,
    #: beyond Triton, which has /opt/ml/models)
    models_root: str = "/opt/ml/models"

    @classmethod
    def from_environment(cls, environ: Mapping[str, str], **flags: object) -> SageMakerOptions:
        """The options with what the SageMaker environment variables say; refuses bad values."""
        ping_mode = environ.get(SAGEMAKER_PING_MODE_ENV, "ready")
        if ping_mode not in _PING_MODES:
            raise ValueError(
                f"{SAGEMAKER_PING_MODE_ENV} must be one of {', '.join(_PING_MODES)}, "
                f"got '{ping_mode}'"
            )
        inference_type = environ.get(SAGEMAKER_INFERENCE_TYPE_ENV, "infer")
        if inference_type not in SAGEMAKER_INFERENCE_TYPES:
            raise ValueError(
                f"Invalid {SAGEMAKER_INFERENCE_TYPE_ENV} '{inference_type}'. Must be one of: "
                f"{', '.join(SAGEMAKER_INFERENCE_TYPES)}."
            )
        return cls(
            default_model=environ.get(SAGEMAKER_DEFAULT_MODEL_ENV, _UNSPECIFIED_MODEL),
            ping_mode=ping_mode,
            inference_type=inference_type,
            models_root=environ.get(SAGEMAKER_MODEL_ROOT_ENV, "/opt/ml/models"),
            **flags,  # type: ignore[arg-type]
        )


@dataclass(slots=True)
class VertexAiOptions:
    """``--allow-vertex-ai`` and the rest (tritonserver's defaults)."""

    allow: bool = False
    #: tritonserver always listens on 0.0.0.0; ``--vertex-ai-address`` is beyond Triton
    address: str = "0.0.0.0"
    port: int = 8080
    thread_count: int | None = None
    #: ``--vertex-ai-default-model``; empty: the repository's only model
    default_model: str = ""
    #: ``AIP_PREDICT_ROUTE`` and ``AIP_HEALTH_ROUTE``: regular expressions of whole paths
    predict_route: str = ""
    health_route: str = ""

    def check_routes(self) -> tuple[re.Pattern[str], re.Pattern[str]]:
        """The compiled routes; refuses an unset or invalid one (Triton's words when unset)."""
        if not self.predict_route:
            # sic: tritonserver's message names the variable so
            raise vertex_ai_refused("API_PREDICT_ROUTE is not defined for Vertex AI endpoint")
        if not self.health_route:
            raise vertex_ai_refused("AIP_HEALTH_ROUTE is not defined for Vertex AI endpoint")
        compiled = []
        for name, route in (
            ("AIP_PREDICT_ROUTE", self.predict_route),
            ("AIP_HEALTH_ROUTE", self.health_route),
        ):
            try:
                compiled.append(re.compile(route))
            except re.error as exc:
                raise vertex_ai_refused(
                    f"{name} '{route}' is not a valid regular expression: {exc}"
                ) from None
        return compiled[0], compiled[1]


def vertex_ai_refused(reason: str) -> ValueError:
    """Why the Vertex AI endpoint cannot start, as tritonserver logs it."""
    return ValueError(f"failed to start Vertex AI service: Invalid argument - {reason}")


# ------------------------------------------------------------------------------------------
# flags: the defaults the environment sets, as tritonserver reads it


def prediction_mode(environ: Mapping[str, str]) -> bool:
    """``AIP_MODE=PREDICTION``: the Vertex AI endpoint is on by default, HTTP and gRPC off."""
    return environ.get("AIP_MODE", "") == "PREDICTION"


def serves_by_default(environ: Mapping[str, str]) -> bool:
    """The default of ``--allow-http`` and ``--allow-grpc``."""
    return not prediction_mode(environ)


def vertex_ai_port(environ: Mapping[str, str]) -> int:
    """The default of ``--vertex-ai-port``: ``AIP_HTTP_PORT``, else 8080."""
    try:
        return parse_port(environ.get("AIP_HTTP_PORT", "8080"))
    except argparse.ArgumentTypeError as exc:
        raise ValueError(f"AIP_HTTP_PORT: {exc}") from None


def repository_required(environ: Mapping[str, str]) -> bool:
    """``--model-repository`` may be left out when ``AIP_STORAGE_URI`` names one."""
    return not environ.get("AIP_STORAGE_URI")


def model_repositories(
    given: Sequence[str] | None, environ: Mapping[str, str] = os.environ
) -> list[Path | str]:
    """``--model-repository`` as given, else ``AIP_STORAGE_URI`` (as tritonserver)."""
    if given:
        return [*given]
    uri = environ.get("AIP_STORAGE_URI", "")
    if not uri:
        raise ValueError("the following arguments are required: --model-repository")
    return [uri]


def options_from(
    args: argparse.Namespace, environ: Mapping[str, str] = os.environ
) -> tuple[SageMakerOptions, VertexAiOptions]:
    """The parsed flags with what the environment says; raises ValueError for bad values."""
    sagemaker = SageMakerOptions.from_environment(
        environ,
        allow=args.allow_sagemaker,
        address=args.sagemaker_address,
        port=args.sagemaker_port,
        safe_port_range=args.sagemaker_safe_port_range,
        thread_count=args.sagemaker_thread_count,
    )
    vertex_ai = VertexAiOptions(
        allow=args.allow_vertex_ai,
        address=args.vertex_ai_address,
        port=args.vertex_ai_port,
        thread_count=args.vertex_ai_thread_count,
        default_model=args.vertex_ai_default_model,
        predict_route=environ.get("AIP_PREDICT_ROUTE", ""),
        health_route=environ.get("AIP_HEALTH_ROUTE", ""),
    )
    if vertex_ai.allow:
        vertex_ai.check_routes()
    return sagemaker, vertex_ai


# ------------------------------------------------------------------------------------------
# ports


@dataclass(slots=True)
class Endpoint:
    """An enabled endpoint as tritonserver's port check sees it; its frontend listens on
    ``port`` (which the ``--workers`` supervisor may set to the port the workers share)."""

    name: str
    address: str
    port: int
    #: the ports every other endpoint on the same address must use
    allowed: tuple[int, int] | None = None

    @property
    def key(self) -> str:
        """Its name in ``--ports-file`` and the workers' logs: ``http``, ``vertex_ai``."""
        return self.name.lower().replace(" ", "_")


_WILDCARDS: Final = frozenset(("0.0.0.0", "::", "[::]", "ipv6:[::]"))


def _same_address(first: str, second: str) -> bool:
    # tritonserver compares the strings; a wildcard address takes the port on every address,
    # so the system would refuse those pairs too, later and with a less clear message
    return first == second or first in _WILDCARDS or second in _WILDCARDS


def check_port_collisions(endpoints: list[Endpoint]) -> None:
    """Refuse two endpoints on one address and port, and ports outside a safe range.

    tritonserver's rule and words; port 0 (the system picks one) never collides.
    """
    for index, current in enumerate(endpoints):
        others = endpoints if current.allowed else endpoints[index + 1 :]
        for other in others:
            if other is current or not _same_address(current.address, other.address):
                continue
            if current.allowed and not current.allowed[0] <= other.port <= current.allowed[1]:
                low, high = current.allowed
                raise ValueError(
                    f"The server cannot listen to {other.name} requests at port {other.port}, "
                    f"allowed port range is [{low}, {high}]"
                )
            if current.port and current.port == other.port:
                raise ValueError(
                    f"The server cannot listen to {current.name} requests and {other.name} "
                    f"requests at the same address and port {current.address}:{current.port}"
                )
