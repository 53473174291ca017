"""triton-core on Ray Serve: replicas that each host a :class:`~triton_core.Server`.

Each replica of the deployment loads the model repository (a local folder or ``s3://`` ...)
into its own server when it starts and stops that server, within ``exit_timeout_secs``,
when Ray Serve shuts it down. HTTP arrives through Ray Serve's proxy and is answered by the
same ASGI app as ``triton-core serve``'s HTTP port, so the stock ``tritonclient`` works
against the proxy. Python callers use the deployment's handle with the project's types::

    from ray import serve
    import triton_core.ray

    serve.run(triton_core.ray.deployment("/models", num_replicas=2), name="triton")
    handle = serve.get_app_handle("triton")
    response = await handle.infer.remote(InferenceRequest("mlp", {"INPUT0": tensor}))

Ray's deployment options (``num_replicas``, ``autoscaling_config``, ``ray_actor_options``,
``max_ongoing_requests`` ...) pass through :func:`deployment` unchanged; ``serve run
triton_core.ray:app model_repository=/models`` builds the same application from
``key=value`` arguments (Ray Serve's CLI and config files).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from ray import serve
from ray.serve import Application

from triton_core.errors import TritonError, invalid_arg, unavailable
from triton_core.frontends.http.fast_path import ASGIApp, Receive, Scope, Send, create_asgi_app
from triton_core.server.core import Server, ServerOptions
from triton_core.types import InferenceRequest, InferenceResponse, ModelIndexEntry, ModelMetadata

logger = logging.getLogger(__name__)

__all__ = [
    "DEPLOYMENT_NAME",
    "ReplicaOptions",
    "RootPathStripped",
    "TritonReplica",
    "app",
    "deployment",
    "replica_options",
    "triton_error_of",
]

#: the deployment's name, unless ``name=`` says otherwise
DEPLOYMENT_NAME: Final = "TritonServer"
#: how much longer than the server's own stop deadline Ray waits before killing a replica
_SHUTDOWN_MARGIN_SECS: Final = 5.0


@dataclass(slots=True)
class ReplicaOptions:
    """What every replica's server is started with."""

    server: ServerOptions
    #: ``--http-max-input-size``: the largest request body the HTTP app accepts
    http_max_input_size: int = 1 << 26
    #: ``--exit-timeout-secs``: the one deadline of a replica's stop
    exit_timeout_secs: float = 30.0


class RootPathStripped:
    """The HTTP app under a Ray Serve route prefix: ``/<prefix>/v2/...`` arrives as ``/v2/...``.

    Ray's proxy keeps the prefix in ``path`` and records it in ``root_path``; the app routes
    on Triton's paths, so the prefix is taken off here. Under the default prefix ``/`` the
    root path is empty and the request passes untouched.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        root = scope.get("root_path")
        if root and scope["type"] == "http" and scope["path"].startswith(root):
            scope = dict(scope)
            scope["path"] = scope["path"][len(root) :] or "/"
            raw_root = root.encode("latin-1")
            raw_path = scope.get("raw_path")
            if raw_path and raw_path.startswith(raw_root):
                scope["raw_path"] = raw_path[len(raw_root) :] or b"/"
        await self.app(scope, receive, send)


@serve.ingress()
class TritonReplica:
    """One replica: a started :class:`Server`, its HTTP app as the ingress, handle methods."""

    # Ray Serve awaits an async constructor, so the replica is ready once the models are
    async def __init__(self, options: ReplicaOptions) -> None:  # type: ignore[misc]
        self._options = options
        self._server = Server(options.server)
        await self._server.start()  # a failed load fails the replica, with the server's message

    def __serve_build_asgi_app__(self) -> ASGIApp:
        app = create_asgi_app(self._server, max_input_size=self._options.http_max_input_size)
        return RootPathStripped(app)

    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        """Run one request; raises :class:`~triton_core.TritonError` as ``Server.infer``."""
        return await self._server.infer(_received(request))

    async def infer_stream(self, request: InferenceRequest) -> AsyncIterator[InferenceResponse]:
        """Every response to a request as the model sends it, the last with ``final``: a
        decoupled model's stream. ``handle.options(stream=True).infer_stream.remote(request)``.
        """
        async for response in self._server.infer_stream(_received(request)):
            yield response

    def is_ready(self) -> bool:
        return self._server.is_ready()

    def model_ready(self, name: str, version: int = -1) -> bool:
        return self._server.model_ready(name, version)

    def model_metadata(self, name: str, version: int = -1) -> ModelMetadata:
        return self._server.model_metadata(name, version)

    def repository_index(self, ready_only: bool = False) -> list[ModelIndexEntry]:
        return self._server.repository_index(ready_only)

    def check_health(self) -> None:
        """Ray Serve's health check: a server that is no longer live gets the replica replaced."""
        if not self._server.is_live():
            raise unavailable("the replica's server is not live")

    async def __del__(self) -> None:
        """Ray Serve stops the replica: drain and unload within the exit timeout."""
        server = getattr(self, "_server", None)  # None: the constructor failed before it
        if server is not None and not await server.stop(self._options.exit_timeout_secs):
            logger.error("Exit timeout expired: the replica's server did not stop in time")


def _received(request: object) -> InferenceRequest:
    """A request from a handle call, checked: the caller may send anything."""
    if not isinstance(request, InferenceRequest):
        raise invalid_arg(f"expected an InferenceRequest, got {type(request).__name__}")
    # it arrives unpickled: no trace or response sender of the caller's process is live here
    request.trace = None
    request.response_sender = None
    return request


def deployment(
    repository: str | list[str],
    *,
    server_options: ServerOptions | None = None,
    http_max_input_size: int = 1 << 26,
    exit_timeout_secs: float = 30.0,
    **serve_options: Any,
) -> Application:
    """The application to give ``serve.run``: replicas serving ``repository``.

    ``repository``: one location or several (local folders, ``s3://`` ...); it replaces
    ``server_options.model_repositories`` when both are given. ``serve_options`` are Ray
    Serve's deployment options (``num_replicas``, ``autoscaling_config``,
    ``ray_actor_options``, ``name`` ...), passed to ``Deployment.options`` unchanged;
    ``graceful_shutdown_timeout_s`` defaults to ``exit_timeout_secs`` plus a margin, so
    that Ray lets the server's own deadline run out first.
    """
    locations = [repository] if isinstance(repository, str) else list(repository)
    if not locations:
        raise ValueError("triton_core.ray.deployment needs a model repository")
    if server_options is None:
        server = ServerOptions(model_repositories=list(locations))
    else:
        server = replace(server_options, model_repositories=list(locations))
    options = ReplicaOptions(server, http_max_input_size, exit_timeout_secs)
    serve_options.setdefault(
        "graceful_shutdown_timeout_s", exit_timeout_secs + _SHUTDOWN_MARGIN_SECS
    )
    replicas = serve.deployment(name=serve_options.pop("name", DEPLOYMENT_NAME))(TritonReplica)
    return replicas.options(**serve_options).bind(options)


#: ``serve run triton_core.ray:app key=value ...``: the keys, each a ``triton-core serve`` flag
_APP_ARGUMENTS: Final = (
    "model_repository",
    "id",
    "strict_readiness",
    "exit_on_error",
    "model_control_mode",
    "load_model",
    "repository_poll_secs",
    "cache_config",
    "http_max_input_size",
    "exit_timeout_secs",
)


_CONTROL_MODES: Final = ("none", "poll", "explicit")


def app(args: Mapping[str, str]) -> Application:
    """Ray Serve's application builder: ``serve run triton_core.ray:app model_repository=...``.

    The arguments are those of :func:`replica_options`. Deployment options (replicas,
    autoscaling, actor resources) come from Ray Serve's config file, or use :func:`deployment`.
    """
    options = replica_options(args)
    return deployment(
        [str(location) for location in options.server.model_repositories],
        server_options=options.server,
        http_max_input_size=options.http_max_input_size,
        exit_timeout_secs=options.exit_timeout_secs,
    )


def replica_options(args: Mapping[str, str]) -> ReplicaOptions:
    """The replicas' options from ``key=value`` arguments (Ray Serve's CLI and config files).

    Each argument is the ``triton-core serve`` flag of the same name with ``_`` for ``-``;
    ``model_repository`` and ``load_model`` take several values separated by commas,
    ``cache_config`` is one cache as ``<name>,<key>=<value>,...``. Raises ValueError for an
    unknown argument or a malformed value, naming it.
    """
    unknown = sorted(set(args) - set(_APP_ARGUMENTS))
    if unknown:
        raise ValueError(
            f"triton_core.ray:app does not know argument(s) {', '.join(unknown)} "
            f"(expected {', '.join(_APP_ARGUMENTS)})"
        )
    repositories = _list_argument(args, "model_repository")
    if not repositories:
        raise ValueError("triton_core.ray:app needs model_repository=<location>[,<location>...]")
    server = ServerOptions(model_repositories=list(repositories))
    if "id" in args:
        server.id = str(args["id"])
    for name in ("strict_readiness", "exit_on_error"):
        if name in args:
            setattr(server, name, _bool_argument(args, name))
    if "model_control_mode" in args:
        server.model_control_mode = str(args["model_control_mode"])
        if server.model_control_mode not in _CONTROL_MODES:
            raise ValueError(
                f"argument model_control_mode={server.model_control_mode!r} is not one of "
                f"{', '.join(_CONTROL_MODES)}"
            )
    server.load_models = _list_argument(args, "load_model")
    if "repository_poll_secs" in args:
        server.repository_poll_secs = _number_argument(args, "repository_poll_secs", float)
    if "cache_config" in args:
        server.cache = _cache_argument(str(args["cache_config"]))
    return ReplicaOptions(
        server,
        http_max_input_size=_number_argument(args, "http_max_input_size", int, 1 << 26),
        exit_timeout_secs=_number_argument(args, "exit_timeout_secs", float, 30.0),
    )


def _list_argument(args: Mapping[str, str], name: str) -> list[str]:
    return [item for item in str(args.get(name, "")).split(",") if item]


def _bool_argument(args: Mapping[str, str], name: str) -> bool:
    text = str(args[name]).lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"argument {name}={args[name]!r} is not a boolean (true or false)")


def _number_argument(
    args: Mapping[str, str], name: str, kind: type[int] | type[float], default: float = 0
) -> Any:
    text = args.get(name)
    if text is None:
        return default
    try:
        value = kind(text)
    except ValueError:
        raise ValueError(f"argument {name}={text!r} is not a number") from None
    if value <= 0:
        raise ValueError(f"argument {name}={text!r} must be greater than 0")
    return value


def _cache_argument(text: str) -> tuple[str, dict[str, str]]:
    name, _, rest = text.partition(",")
    settings = {}
    for item in filter(None, rest.split(",")):
        key, equals, value = item.partition("=")
        if not equals or not key:
            raise ValueError(f"argument cache_config: '{item}' is not <key>=<value>")
        settings[key] = value
    if not name:
        raise ValueError("argument cache_config must be <cache>,<key>=<value>,...")
    return name, settings


def triton_error_of(error: BaseException) -> TritonError | None:
    """The :class:`TritonError` behind what a handle call raised (Ray wraps it), or None."""
    if isinstance(error, TritonError):
        return error
    cause = getattr(error, "cause", None)
    return cause if isinstance(cause, TritonError) else None
