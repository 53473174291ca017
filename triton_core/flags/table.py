"""Every flag of ``triton-core serve``, one row each, by section of ``--help``.

A row says how the flag parses, where its value goes (an options field, or a converter of
:mod:`triton_core.flags.converters` that several flags feed) and, for a flag of
``tritonserver``, its row of docs/compatibility.md.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Final

from triton_core.flags import converters as to
from triton_core.flags import parsers
from triton_core.flags.model import (
    GPU_ONLY,
    NO_EFFECT,
    READ_EARLY,
    Flag,
    Form,
    FromEnv,
    Limit,
    Triton,
)
from triton_core.flags.plugin_folders import (
    DEFAULT_BACKEND_DIRECTORY,
    DEFAULT_CACHE_DIRECTORY,
    DEFAULT_REPOAGENT_DIRECTORY,
)
from triton_core.frontends import cloud
from triton_core.frontends.grpc import limits as grpc_limits
from triton_core.frontends.restricted import API_GROUPS
from triton_core.observability.logsettings import LOG_FORMATS
from triton_core.observability.tracing.settings import DEPRECATED as TRACE_DEPRECATED
from triton_core.scheduling import inline
from triton_core.scheduling.rate_limiter import MODES as RATE_LIMIT_MODES
from triton_core.shared_memory import registry as shm_registry
from triton_core.tensors import allocator

WORKS: Final = Triton()
#: ``--grpc-infer-response-compression-level``: Triton's levels
COMPRESSION_LEVELS: Final = ("none", "low", "medium", "high")
_GPU_MEMORY: Final = Triton(
    NO_EFFECT,
    "this server allocates no GPU memory itself (the backends do); one INFO line at start",
)
_PLUGIN_FOLDER: Final = "its Python modules and packages are registered as plugins"
_DEPRECATED_TRACE: Final = Triton(
    note="deprecated as in Triton: a warning names the `--trace-config` setting"
)
_API_GROUPS: Final = ", ".join(API_GROUPS)


def works(note: str) -> Triton:
    return Triton(note=note)


def _section(group: str, *flags: Flag) -> tuple[Flag, ...]:
    return tuple(replace(flag, group=group) for flag in flags)


def _plugin_folder(flag: str, default: str, what: str, note: str) -> Flag:
    return Flag(
        flag, READ_EARLY, metavar="DIR", triton=works(note),
        help=f"import the Python modules and packages here as plugins ({what}; default "
        f"{default}); skipped when absent",
    )  # fmt: skip


_REPOSITORY: Final = _section(
    "model repository",
    Flag("--model-repository", to.REPOSITORIES, aliases=("--model-store",), form="repeat",
         required=FromEnv(cloud.repository_required), metavar="PATH", triton=WORKS,
         help="model repository: a folder, or s3://, gs://, as:// (repeatable)"),
    Flag("--model-control-mode", "server.model_control_mode", default="none",
         type=str.lower,  # Triton takes any case: Triton's QA passes EXPLICIT
         choices=("none", "poll", "explicit"),
         triton=works("none, poll or explicit, in any case as Triton reads it"),
         help="none: load all at start; poll: follow repository changes; explicit: "
         "load/unload API"),
    Flag("--repository-poll-secs", "server.repository_poll_secs", type=float, default=15.0,
         metavar="SECONDS",
         triton=WORKS, help="seconds between two looks at the repositories in poll mode"),
    Flag("--load-model", "server.load_models", form="repeat", default=(), metavar="NAME",
         triton=works("an ensemble loads the models its steps call, as Triton"),
         help="model to load at start in explicit mode (repeatable; '*' loads all)"),
    Flag("--model-config-name", "server.model_config_name", type=parsers.config_name,
         default="", metavar="NAME",
         triton=works("configs/<name>.pbtxt where a model has it, else config.pbtxt"),
         help="load <model>/configs/NAME.pbtxt when it exists, else config.pbtxt"),
    Flag("--model-load-thread-count", "server.model_load_thread_count", type=int, default=4,
         metavar="N",
         triton=WORKS, help="models loaded at once"),
    Flag("--model-load-retry-count", "server.model_load_retry_count",
         type=parsers.integer(0), default=0, metavar="N", triton=WORKS,
         help="retry a model load that fails N more times"),
    Flag("--model-namespacing", "server.model_namespacing", form="bool", default=False,
         help="models of one name may live in several repositories",
         triton=works(
             "a name may be in several repositories; ensembles call the model of their own "
             "repository first; a request by an ambiguous name is refused with Triton's "
             "message; metrics get a `namespace` label. In poll mode, and in explicit mode at "
             "each load request (which looks at the repositories again, as Triton polls them "
             "for it), an ensemble resolves its steps again when a name gains or loses a "
             "repository")),
    Flag("--disable-auto-complete-config", to.AUTO_COMPLETE, form="bool", default=False,
         triton=WORKS, help="do not complete configs from the models themselves"),
    Flag("--strict-model-config", to.AUTO_COMPLETE, form="bool", default=False,
         triton=works("deprecated, as in Triton"), help="deprecated alias of the above"),
    _plugin_folder("--backend-directory", DEFAULT_BACKEND_DIRECTORY, "backends",
                   f"{_PLUGIN_FOLDER}; its `<name>/model.py` folders are Triton's Python-based "
                   "backends (served by the Python plugin); an absent folder is logged once and "
                   "skipped"),
    _plugin_folder("--repoagent-directory", DEFAULT_REPOAGENT_DIRECTORY, "repository agents",
                   _PLUGIN_FOLDER),
    _plugin_folder("--cache-directory", DEFAULT_CACHE_DIRECTORY, "response caches",
                   _PLUGIN_FOLDER),
    Flag("--backend-config", to.BACKEND_OPTIONS, form="repeat", default=(),
         type=parsers.backend_config, metavar="BACKEND,KEY=VALUE", triton=WORKS,
         help="a backend setting (repeatable); KEY=VALUE alone applies to every backend"),
    Flag("--cache-config", to.CACHE, form="repeat", default=(), type=parsers.backend_config,
         metavar="CACHE,KEY=VALUE", triton=WORKS,
         help="response cache setting, e.g. local,size=1048576 (repeatable)"),
    Flag("--response-cache-byte-size", to.CACHE, metavar="BYTES", type=int,
         triton=works("deprecated, as in Triton"),
         help="deprecated: same as --cache-config local,size=BYTES"),
)  # fmt: skip

_SERVER: Final = _section(
    "server",
    Flag("--id", "server.id", metavar="NAME", default="triton", triton=WORKS,
         help="server name in server metadata"),
    Flag("--strict-readiness", "server.strict_readiness", form="bool", default=True,
         help="ready only when every model is ready",
         triton=works(
             "a server with nothing to serve (empty repository, explicit mode with nothing "
             "loaded) is ready, as Triton; as Triton 2.7x, `/v2/health/ready` and gRPC "
             "`ServerReady` also ask the instances of every ready model (a Python model's "
             "`is_ready()`, its stub's health)")),
    Flag("--exit-on-error", "server.exit_on_error", form="bool", default=True, triton=WORKS,
         help="exit when a model fails to load at start-up"),
    Flag("--exit-timeout-secs", "frontends.exit_timeout_secs", type=float, default=30.0,
         metavar="SECONDS",
         triton=WORKS,
         help="seconds the stop may take after a stop signal; then the process exits"),
    Flag("--workers", "run.workers", default="1", metavar="N|auto",
         help="server processes sharing the ports, under gunicorn (auto: one per CPU; "
         "1: this process alone); see docs/scale-out.md"),
    Flag("--ports-file", "frontends.ports_file", metavar="PATH",
         help="once every endpoint listens, write their ports to PATH as JSON "
         '({"http": 8000, "grpc": 8001, "metrics": 8002}); with port 0 the system picks '
         "them"),
    Flag("--rate-limit", "server.rate_limit", default="off",
         type=str.lower,  # any case, as Triton
         choices=RATE_LIMIT_MODES,
         triton=works("execution_count or off, in any case as Triton reads it"),
         help="execution_count: an instance runs a batch only while it holds the resources "
         "of its instance group's rate_limiter; off (default): instances run whenever free"),
    Flag("--rate-limit-resource", to.RATE_LIMIT_RESOURCES, form="repeat", default=(),
         type=parsers.rate_limit_resource, metavar="NAME:COUNT[:DEVICE]", triton=WORKS,
         help="how many of a rate-limiter resource exist (per device, or on DEVICE); "
         "without it, the largest count any instance asks for (repeatable)"),
    Flag("--host-policy", "server.host_policies", form="repeat", default=(),
         type=parsers.host_policy_setting, metavar="NAME,KEY=VALUE",
         help="the CPUs of the instances whose group names NAME: KEY is numa-node or "
         "cpu-cores (repeatable)",
         triton=works(
             "`cpu-cores` (Triton's ranges `0-3,8-11`, a single id too) or `numa-node` (that "
             "node's CPUs, so memory follows first touch): the threads of instances whose "
             "group names the policy, the threads their backend starts at creation (ONNX "
             "Runtime's intra-op pool, unless a config's `intra_op_thread_count: 0` lets ONNX "
             "Runtime pin its own) and a Python model's process run there; an unknown setting "
             "is refused with Triton's message, an unknown policy name in a config fails the "
             "load (Triton ignores it); NUMA memory binding (Triton's set_mempolicy) is left "
             "to first touch")),
    Flag("--buffer-manager-thread-count", "server.buffer_manager_thread_count",
         type=parsers.integer(0), default=0, metavar="N",
         help="threads that copy large tensor contents (0: copied inline)",
         triton=works(
             "N threads (named `buffer-manager`) copy large tensor contents: a batch's inputs "
             "of 1 MiB and more are gathered part by part in parallel, large outputs written "
             "into shared-memory regions; 0 (the default) copies inline as Triton's 0 does; "
             "splitting a batch's outputs needs no copy (views)")),
    Flag("--pinned-memory-pool-byte-size", to.METRICS, type=parsers.integer(0), metavar="N",
         help="the pinned memory pool size the metrics report (256 MiB)",
         triton=works(
             "the size `nv_pinned_memory_pool_total_bytes` reports; as in Triton without a "
             "GPU, nothing is allocated for it")),
    Flag("--memory-trim-threshold", to.MEMORY_TRIM, type=int,
         default=allocator.DEFAULT_TRIM_THRESHOLD, metavar="BYTES",
         help="freed memory kept for reuse rather than returned to the system, so that large "
         "tensors do not fault in fresh pages each request (glibc; 0: its default)"),
    Flag("--inline-execution-budget-us", to.INLINE_BUDGET, type=int,
         default=inline.DEFAULT_BUDGET_US, metavar="MICROSECONDS",
         help="a small batch of a model whose recent executions each took at most this long "
         "runs on the event loop when its instances are idle, saving two thread hand-offs "
         "(backends that allow it: onnxruntime on CPU); 0: always on instance threads"),
    Flag("--allow-client-shm", to.SHARED_MEMORY, form="bool", default=False, triton=WORKS,
         help="let clients register shared-memory regions and use them in requests",
         limit=Limit("shared-memory", "clients may register and unregister regions and name "
                     "them in tensors", "501 / UNIMPLEMENTED, Triton's message")),
    Flag("--shm-max-regions", to.SHARED_MEMORY, metavar="N", type=int,
         default=shm_registry.DEFAULT_MAX_REGIONS,
         help="most shared-memory regions registered at once",
         limit=Limit("shared-memory", "regions registered at once, all kinds together",
                     "400 naming the flag")),
    Flag("--shm-max-total-byte-size", to.SHARED_MEMORY, metavar="BYTES", type=int,
         default=shm_registry.DEFAULT_MAX_TOTAL_BYTE_SIZE,
         help="most bytes of all registered shared-memory regions together",
         limit=Limit("shared-memory", "bytes of all registered regions together",
                     "400 naming the flag")),
)  # fmt: skip

_LOGGING: Final = _section(
    "logging",
    Flag("--log-verbose", "log.verbose", type=parsers.verbose_level, default=0,
         metavar="LEVEL",
         triton=works(
             "reaches the triton_core loggers and those of plugins, not third-party libraries"),
         help="verbose logging when > 0 (true/false stand for 1/0, as in Triton)"),
    Flag("--log-info", "log.info", form="bool", default=True, triton=WORKS,
         help="log informational messages"),
    Flag("--log-warning", "log.warning", form="bool", default=True, triton=WORKS,
         help="log warnings"),
    Flag("--log-error", "log.error", form="bool", default=True, triton=WORKS,
         help="log errors"),
    Flag("--log-format", "log.format", type=parsers.choice("--log-format", LOG_FORMATS),
         default="default", metavar="FORMAT",
         triton=works("default, ISO8601 (Triton's layouts), json beyond Triton"),
         help="default (Triton's 'I1201 21:51:19.123456 PID file:line] msg'), ISO8601, or "
         "json (one object per line)"),
    Flag("--log-file", "log.file", default="", metavar="PATH",
         triton=works("appended to; every log line goes there"),
         help="append every log line here (default: console)"),
)  # fmt: skip


def _listener(kind: str, what: str, port: int) -> tuple[Flag, ...]:
    """``--allow-<kind>`` and where it listens (off by default in Vertex AI's prediction
    mode, as tritonserver)."""
    return (
        Flag(f"--allow-{kind}", f"frontends.allow_{kind}", form="bool",
             default=FromEnv(cloud.serves_by_default), triton=WORKS, help=f"serve {what}"),
        Flag(f"--{kind}-address", f"frontends.{kind}_address", default="0.0.0.0",
             metavar="ADDRESS", triton=WORKS),
        Flag(f"--{kind}-port", f"frontends.{kind}_port", type=int, default=port, metavar="PORT",
             triton=WORKS),
        Flag(f"--reuse-{kind}-port", f"frontends.reuse_{kind}_port", form="bool", default=False,
             triton=works("SO_REUSEPORT"),
             help="listen with SO_REUSEPORT, so several servers share the port"),
    )  # fmt: skip


def _tls(prefix: str, name: str, triton: Triton | None) -> tuple[Flag, ...]:
    """``--<prefix>-use-ssl`` and the rest, as tritonserver's ``--grpc-use-ssl`` family."""
    into = to.HTTP_TLS if prefix == "http" else to.GRPC_TLS
    return (
        Flag(f"--{prefix}-use-ssl", into, form="bool", default=False, triton=triton,
             help=f"serve {name} over TLS (1.2 or newer)"),
        Flag(f"--{prefix}-use-ssl-mutual", into, form="bool", default=False, triton=triton,
             help=f"serve {name} over TLS and require client certificates (implies "
             f"--{prefix}-use-ssl)"),
        Flag(f"--{prefix}-server-cert", into, metavar="PEM", triton=triton,
             help="server certificate"),
        Flag(f"--{prefix}-server-key", into, metavar="PEM", triton=triton,
             help="server private key"),
        Flag(f"--{prefix}-root-cert", into, metavar="PEM", triton=triton,
             help=f"CA that signs client certificates (with --{prefix}-use-ssl-mutual)"),
        Flag(f"--{prefix}-ssl-handshake-timeout-secs", into, type=float, metavar="SECONDS",
             help="close a connection whose TLS handshake takes longer (default 10)"),
    )  # fmt: skip


def _http_limit(flag: str, kind: parsers.Parser, default: float, help: str, limit: Limit) -> Flag:
    """What one HTTP client may make the server hold or wait for (docs/security.md)."""
    metavar = "SECONDS" if flag.endswith("-secs") else "BYTES" if "size" in flag else "N"
    into = "frontends.http_keepalive_timeout_secs" if "keepalive" in flag else to.HTTP_LIMITS
    return Flag(flag, into, type=kind, default=default, metavar=metavar, help=help, limit=limit)


_SECONDS: Final = parsers.positive(float)
_COUNT: Final = parsers.positive(int)

_HTTP: Final = _section(
    "HTTP",
    *_listener("http", "HTTP/REST", 8000),
    Flag("--http-header-forward-pattern", "frontends.http_header_forward_pattern",
         type=parsers.header_pattern, metavar="REGEX",
         triton=works(
             "infer requests; header names as received (lowercase); RE2 syntax, as Triton "
             "(see --grpc-header-forward-pattern)"),
         help="pass request headers whose names match as request parameters"),
    Flag("--http-thread-count", "frontends.http_thread_count", type=parsers.integer(1),
         metavar="N", help="threads that decode large infer bodies off the event loop (2)",
         triton=works(
             "the threads that decode large infer bodies off the event loop (small ones are "
             "decoded on it, as before); default 2, not Triton's 8: a decode holds the GIL, "
             "and each more thread takes turns from the event loop; named `http-decode`")),
    Flag("--http-restricted-api", to.HTTP_RESTRICTIONS, form="repeat", default=(),
         metavar="API[,API...]:KEY=VALUE", triton=WORKS,
         help="answer these APIs only with header KEY: VALUE (repeatable; APIs: "
         f"{_API_GROUPS})"),
    *_tls("http", "HTTP", None),
    _http_limit("--http-header-timeout-secs", _SECONDS, 10.0,
                "408 when a request's headers take longer",
                Limit("http", "the request line and headers must be complete this long after "
                      "the connection opens or the request's first byte (any byte on an idle "
                      "keep-alive connection counts)", "408, close")),
    _http_limit("--http-body-timeout-secs", _SECONDS, 30.0,
                "408 when a body owed stalls this long",
                Limit("http", "the longest gap between body bytes while a body is owed; also "
                      "how long answers may wait for a client that does not read them",
                      "408 (or close, with answers owed)")),
    _http_limit("--http-keepalive-timeout-secs", _SECONDS, 75.0,
                "close connections idle this long",
                Limit("http", "an idle keep-alive connection is closed", "close")),
    _http_limit("--http-max-header-size", _COUNT, 16384,
                "bytes of URL and headers (414/431 beyond)",
                Limit("http", "bytes of the URL and the header names and values (+4 per "
                      "header)", "414 (URL), 431, close")),
    _http_limit("--http-max-header-count", _COUNT, 100, "headers in one request (431 beyond)",
                Limit("http", "headers in one request", "431, close")),
    _http_limit("--http-max-connections", _COUNT, 1024,
                "open connections (503 and close beyond)",
                Limit("http", "connections open at once per listener; a new one beyond closes "
                      "the connection idle the longest (between requests, or silent since it "
                      "connected), and only when every connection has a request under way is "
                      "it refused; the open-files limit is raised from soft to hard at start "
                      "(a warning when it is below this plus 256)",
                      "503 and close when none is idle")),
    _http_limit("--http-max-input-size", int, 1 << 26,
                "bytes of one request body, after decompression (413 beyond)",
                Limit("http", "bytes of a request body, from Content-Length before any byte "
                      "is read (no `100 Continue` for it), while a chunked body arrives, and "
                      "after decompression", "413, close")),
    _http_limit("--http-max-buffered-input", _COUNT, 1 << 30,
                "bytes of request bodies held at once, over all connections (503 beyond)",
                Limit("http", "bytes of request bodies held at once over all the listener's "
                      "connections, from a body's first byte until its answer is sent",
                      "503, close")),
    _http_limit("--http-max-json-elements", _COUNT, 1 << 18,
                "JSON values, BYTES elements (400 beyond)",
                Limit("http", "JSON elements of a request (counted as `,` `[` `{` before "
                      "parsing, so an upper bound) and elements of binary BYTES inputs",
                      "400 naming the flag")),
    # orjson refuses more than 1024 levels; the decoder's recursion stays far below that
    _http_limit("--http-max-json-depth", parsers.positive(int, 256), 32,
                "JSON nesting depth (400 beyond)",
                Limit("http", "nesting of JSON arrays and objects (1-256)",
                      "400 naming the flag")),
)  # fmt: skip


#: the gRPC limits whose row in docs/security.md says more than their help: (meaning, grpcio)
_GRPC_LIMIT_DOCS: Final = {
    "--grpc-max-connections": (
        "connections open at once; a new one beyond sends away (GOAWAY NO_ERROR) the "
        "connection with no call open for the longest, and only when every connection has a "
        "call open is it refused (raise with ulimit -n)",
        "GOAWAY ENHANCE_YOUR_CALM when none is idle",
    ),
    "--grpc-max-stream-requests-in-flight": (
        "requests of one `ModelStreamInfer` stream read and not yet answered in full, answers "
        "waiting to be written included; at the bound the stream is not read further, and flow "
        "control holds the client",
        "honoured (the same servicer)",
    ),
}


def _with_grpcio(limit: grpc_limits.LimitFlag) -> str:
    """What ``--grpc-transport grpcio`` does with the limit."""
    if limit.grpcio_option:
        return f"`{limit.grpcio_option}`"
    return "honoured (the same servicer)" if limit.servicer else "refused"


def _grpc_limit(limit: grpc_limits.LimitFlag) -> Flag:
    """A flag of :data:`grpc_limits.FLAGS`: None when not given, so the limits' default
    holds."""
    default = limit.default_text()
    help = f"{limit.help} (default: {default})"
    triton = WORKS if limit.triton else None
    meaning, grpcio = _GRPC_LIMIT_DOCS.get(limit.name, (limit.help, _with_grpcio(limit)))
    if limit.kind == "bool":
        row = Limit("grpc", meaning, grpcio, f"`{default}`")
        return Flag(limit.name, to.GRPC_LIMITS, form="bool", triton=triton, help=help, limit=row)
    metavar = "MS" if limit.kind == "ms" else "N"
    row = Limit("grpc", meaning, grpcio, default)
    return Flag(
        limit.name, to.GRPC_LIMITS, type=int, metavar=metavar, triton=triton, help=help,
        limit=row,
    )  # fmt: skip


_GRPC: Final = _section(
    "gRPC",
    *_listener("grpc", "gRPC", 8001),
    Flag("--grpc-header-forward-pattern", "frontends.grpc_header_forward_pattern",
         type=parsers.header_pattern, metavar="REGEX",
         help="pass request headers whose names match as request parameters",
         triton=works(
             "ModelInfer and ModelStreamInfer; RE2 syntax searched in the name, "
             "case-insensitive unless the pattern turns it off (`(?-i)...`), as Triton's "
             "`(?i)` prefix and PartialMatch; a pattern RE2 refuses stops the start naming the "
             "flag (Triton logs it and forwards nothing)")),
    Flag("--grpc-transport", "frontends.grpc_transport", choices=("http2", "grpcio"),
         default="http2", help="http2: the built-in HTTP/2 transport (faster); grpcio: grpc.aio"),
    Flag("--grpc-infer-thread-count", to.HTTP2_TRANSPORT_ONLY,
         type=parsers.grpc_infer_threads, metavar="N",
         help="threads that inflate compressed requests off the event loop (2)",
         triton=works(
             "the threads that inflate compressed gRPC requests off the event loop (default "
             "2, Triton's range 2-128 and message); named `grpc-infer`; `--grpc-transport "
             "http2` only (grpcio inflates in gRPC core's threads: refused there)")),
    Flag("--grpc-infer-allocation-pool-size", to.HTTP2_TRANSPORT_ONLY,
         type=parsers.integer(0), metavar="N",
         help="buffers of large request messages kept for reuse (8)",
         limit=Limit("grpc", "buffers of large (4 MiB and more) request messages kept for "
                     "reuse once nothing refers to them, 1 GiB in all whatever the count; one "
                     "idle for a minute is let go (Triton's flag)", "refused", "8"),
         triton=works(
             "Triton keeps up to N freed gRPC call states, with their request messages, for "
             "reuse; here the gRPC endpoint keeps up to N buffers of large (4 MiB and more) "
             "request messages, 1 GiB in all, each handed out again once nothing refers to it "
             "(default 8, as Triton; 0 keeps none); `--grpc-transport http2` only")),
    Flag("--grpc-infer-response-compression-level", "frontends.grpc_compression_level",
         metavar="LEVEL",
         type=parsers.choice(
             "--grpc-infer-response-compression-level", COMPRESSION_LEVELS, lower=True),
         default="none", help="gzip inference responses: none, low, medium or high",
         triton=works(
             "inference answers, gzip or deflate as gRPC core picks; with --grpc-transport "
             "grpcio every answer")),
    Flag("--grpc-restricted-protocol", to.GRPC_RESTRICTIONS, form="repeat", default=(),
         metavar="API[,API...]:KEY=VALUE", triton=WORKS,
         help="answer these RPCs only with metadata triton-grpc-protocol-KEY: VALUE "
         f"(repeatable; APIs: {_API_GROUPS})"),
    *_tls("grpc", "gRPC", WORKS),
    *(_grpc_limit(limit) for limit in grpc_limits.FLAGS),
    Flag("--grpc-max-response-pool-size", to.GRPC_LIMITS, type=parsers.response_pool_size,
         metavar="N",
         limit=Limit("grpc", "a streamed request's responses produced but not yet being "
                     "written; its decoupled model's sender waits while this many are "
                     "(Triton's flag)", "honoured (the same servicer)",
                     "none (Triton's INT_MAX)"),
         help="a streamed request's responses produced but not yet written, at most: its "
         "decoupled model's sender waits while N are (default: no limit)",
         triton=works(
             "per request, as Triton's per-call response queue: on `ModelStreamInfer`, a "
             "decoupled model's next response waits while N of that request's responses are "
             "produced but not yet handed to the stream's writer (one is freed as its write "
             "begins, where Triton pops it for gRPC's `Write`). What waits is the sender: a "
             "threaded backend's thread in `send`, a Python model's `response_sender.send` "
             "(the server answers it once the response fits), an ensemble's decoupled steps "
             "(each held by a pool of its own, emptied as the ensemble's responses fit "
             "theirs). A flag-only final never waits. The client cancelling or going away, the "
             "request ending or the server stopping wake every waiting sender for good (the "
             "model sees `is_cancelled()`). Unary calls (one response), HTTP and the "
             "in-process API are not bound; both gRPC transports. A value of 0 or less is "
             "refused with Triton's message")),
)  # fmt: skip

_METRICS: Final = _section(
    "metrics",
    Flag("--allow-metrics", "frontends.allow_metrics", form="bool", default=True,
         triton=WORKS, help="serve Prometheus metrics"),
    Flag("--allow-gpu-metrics", to.METRICS, form="bool", default=True,
         triton=works("NVML GPU families; none without a GPU (one log line says why)"),
         help="report GPU metrics through NVML"),
    Flag("--allow-cpu-metrics", to.METRICS, form="bool", default=True, triton=WORKS,
         help="report CPU utilisation and memory"),
    Flag("--metrics-address", "frontends.metrics_address", metavar="ADDRESS", triton=WORKS,
         help="default: --http-address"),
    Flag("--metrics-port", "frontends.metrics_port", type=int, default=8002, metavar="PORT",
         triton=WORKS),
    Flag("--metrics-interval-ms", to.METRICS, type=parsers.finite_positive, default=2000.0,
         metavar="MS", triton=works("how often the CPU and memory gauges refresh"),
         help="how often the gauges (CPU, memory, pending requests) refresh"),
    Flag("--metrics-config", to.METRICS, form="repeat", default=(), metavar="KEY=VALUE",
         triton=works(
             "counter_latencies, histogram_latencies, summary_latencies, summary_quantiles"),
         help="counter_latencies=<bool> (true), histogram_latencies=<bool> (false), "
         "summary_latencies=<bool> (false), summary_quantiles=<q>:<error>,..."),
)  # fmt: skip

_CLOUD: Final = _section(
    "SageMaker and Vertex AI",
    Flag("--allow-sagemaker", to.CLOUD, form="bool", default=False, triton=WORKS,
         help="serve SageMaker's /ping and /invocations"),
    Flag("--sagemaker-port", to.CLOUD, type=parsers.parse_port, default=8080, metavar="PORT",
         triton=WORKS),
    Flag("--sagemaker-address", to.CLOUD, metavar="ADDRESS", default="0.0.0.0",
         help="beyond tritonserver (always 0.0.0.0)"),
    Flag("--sagemaker-safe-port-range", to.CLOUD, type=parsers.port_range,
         metavar="LOW-HIGH", triton=WORKS,
         help="the ports every other endpoint must listen on"),
    Flag("--sagemaker-thread-count", to.CLOUD, metavar="N", type=parsers.thread_count,
         help="the SageMaker listener's decoding threads (2)",
         triton=works(
             "the SageMaker listener's own decoding threads, as `--http-thread-count` "
             "(default 2, not Triton's 8); named `sagemaker-infer`")),
    Flag("--allow-vertex-ai", to.CLOUD, form="bool", default=FromEnv(cloud.prediction_mode),
         triton=WORKS,
         help="serve Vertex AI's predict and health routes (default: true if "
         "AIP_MODE=PREDICTION)"),
    Flag("--vertex-ai-port", to.CLOUD, metavar="PORT", type=parsers.parse_port,
         default=FromEnv(cloud.vertex_ai_port), triton=WORKS,
         help="default: AIP_HTTP_PORT if set, 8080 otherwise"),
    Flag("--vertex-ai-address", to.CLOUD, metavar="ADDRESS", default="0.0.0.0",
         help="beyond tritonserver (always 0.0.0.0)"),
    Flag("--vertex-ai-thread-count", to.CLOUD, metavar="N", type=parsers.thread_count,
         help="the Vertex AI listener's decoding threads (2)",
         triton=works(
             "the Vertex AI listener's own decoding threads, as `--http-thread-count` "
             "(default 2, not Triton's 8); named `vertex-ai-infer`")),
    Flag("--vertex-ai-default-model", to.CLOUD, default="", metavar="NAME", triton=WORKS,
         help="the model the predict route runs (default: the repository's only model)"),
)  # fmt: skip


def _deprecated_trace(setting: str, form: Form = "value", default: Any = None) -> Flag:
    flag = "--trace-" + setting.replace("_", "-")
    metavar = {"file": "PATH", "level": "LEVEL"}.get(setting, "N")
    return Flag(
        flag, to.TRACE, form=form, default=default, metavar=metavar, triton=_DEPRECATED_TRACE,
        help=f"DEPRECATED: {TRACE_DEPRECATED[setting]}",
    )  # fmt: skip


_TRACING: Final = _section(
    "tracing",
    Flag("--trace-config", to.TRACE, form="repeat", default=(),
         metavar="[MODE,]SETTING=VALUE", triton=WORKS,
         help="global: rate (1000), level (OFF|TIMESTAMPS|TENSORS, repeatable), count (-1), "
         "mode (triton|opentelemetry); triton,file=<path> / triton,log-frequency=<n> (0); "
         "opentelemetry,url=<otlp/http url> / resource=<key>=<value> / bsp_max_queue_size / "
         "bsp_schedule_delay / bsp_max_export_batch_size"),
    _deprecated_trace("file"),
    _deprecated_trace("level", form="repeat", default=()),
    _deprecated_trace("rate"),
    _deprecated_trace("count"),
    _deprecated_trace("log_frequency"),
)  # fmt: skip

_GPUS: Final = _section(
    "GPU flags of tritonserver (no effect here)",
    Flag("--cuda-memory-pool-byte-size", GPU_ONLY, form="repeat",
         type=parsers.pair("--cuda-memory-pool-byte-size", int, int), metavar="GPU:BYTES",
         triton=_GPU_MEMORY),
    Flag("--cuda-virtual-address-size", GPU_ONLY, form="repeat",
         type=parsers.pair("--cuda-virtual-address-size", int, int), metavar="GPU:BYTES",
         triton=_GPU_MEMORY),
    Flag("--min-supported-compute-capability", GPU_ONLY,
         type=parsers.finite_positive, metavar="CC", triton=_GPU_MEMORY),
    Flag("--model-load-gpu-limit", GPU_ONLY, form="repeat",
         type=parsers.pair("--model-load-gpu-limit", int, float), metavar="DEVICE:FRACTION",
         triton=_GPU_MEMORY),
    Flag("--enable-peer-access", GPU_ONLY, form="bool", help="(default: true)",
         triton=Triton(NO_EFFECT, "no GPU peer access is set up here; one INFO line at start")),
)  # fmt: skip

#: the flags of ``triton-core serve``, in the order of ``--help``
FLAGS: Final[tuple[Flag, ...]] = (
    *_REPOSITORY,
    *_SERVER,
    *_LOGGING,
    *_HTTP,
    *_GRPC,
    *_METRICS,
    *_CLOUD,
    *_TRACING,
    *_GPUS,
)
