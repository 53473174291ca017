"""What one gRPC client may make the server hold or do, and the ``--grpc-...`` flags that set it.

One frozen :class:`GrpcLimits` travels from the command line to every connection, so that the
hot path reads plain attributes. Times are in milliseconds on the command line, as Triton's
keepalive flags are, and in seconds here. The flags named after Triton's keep Triton's
meanings and defaults; the others bound what RFC 9113 leaves to the server.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class GrpcLimits:
    """Every bound of the gRPC frontend; times in seconds."""

    #: connections open at once; more are sent away at once
    max_connections: int = 1000
    #: streams a client may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS)
    max_concurrent_streams: int = 100
    #: decoded bytes of one header block, in HPACK's accounting (SETTINGS_MAX_HEADER_LIST_SIZE)
    max_header_list_size: int = 16_384
    #: the largest frame payload a client may send (SETTINGS_MAX_FRAME_SIZE)
    max_frame_size: int = 16_384
    #: the largest request message, compressed or inflated
    max_message_size: int = 1 << 26
    #: bytes of request messages held while they arrive, over all calls of the server
    max_buffered_input: int = 1 << 30
    #: flow-control window this side grants per stream and per connection
    stream_window_size: int = 1 << 20
    connection_window_size: int = 1 << 22
    #: frames one header block may span (HEADERS plus CONTINUATIONs)
    max_continuation_frames: int = 32
    #: entries one SETTINGS frame may carry
    max_settings_entries: int = 32
    #: SETTINGS frames a client may send in a burst; the budget refills a tenth of it a second
    settings_budget: int = 100
    #: streams a client may reset (or have refused) in a burst; refills a tenth of it a second
    reset_budget: int = 200
    #: bytes of answers and control frames queued for a client that does not read
    max_queued_output: int = 1 << 26
    #: seconds to send the preface and SETTINGS after connecting
    handshake_timeout: float = 10.0
    #: seconds without streams or frames before a connection is closed (0: never)
    idle_timeout: float = 300.0
    #: seconds a partly received frame may take to complete
    frame_timeout: float = 30.0
    #: seconds a closing connection may take to read its last frames before it is dropped
    close_timeout: float = 5.0
    #: Triton's keepalive: ping a connection quiet for this long, drop it without an answer
    keepalive_time: float = 7200.0
    keepalive_timeout: float = 20.0
    keepalive_permit_without_calls: bool = False
    max_pings_without_data: int = 2
    min_recv_ping_interval_without_data: float = 300.0
    max_ping_strikes: int = 2
    #: None: connections live as long as they are used
    max_connection_age: float | None = None
    max_connection_age_grace: float | None = None
    #: requests of one ModelStreamInfer stream read and not yet answered in full (answers
    #: waiting to be written included); at the bound the stream is not read further
    max_stream_requests_in_flight: int = 1024
    #: ``--grpc-max-response-pool-size``: a streamed request's responses produced but not yet
    #: written; its model's sender waits while this many are (None: no bound, Triton's INT_MAX)
    max_response_pool_size: int | None = None


DEFAULT_LIMITS: Final = GrpcLimits()


@dataclass(frozen=True, slots=True)
class LimitFlag:
    """A flag of :class:`GrpcLimits`: a row of the flag table (:mod:`triton_core.flags`)."""

    name: str
    field: str
    kind: str  # "int": a count or bytes; "ms": milliseconds; "bool"
    help: str
    #: its grpcio channel argument, None where grpcio has no equivalent
    grpcio_option: str | None = None
    #: the servicer applies it, on both transports
    servicer: bool = False
    #: a flag of tritonserver, with its meaning and default
    triton: bool = False

    def default_text(self) -> str:
        """The default as the flag takes it (ms for times)."""
        default = getattr(DEFAULT_LIMITS, self.field)
        if default is None:
            return "none"
        if self.kind == "bool":
            return str(default).lower()
        return str(_as_flag_value(self, default))


FLAGS: Final = (
    LimitFlag("--grpc-max-connections", "max_connections", "int",
              "connections open at once; more get GOAWAY and are closed (raise with ulimit -n)"),
    LimitFlag("--grpc-max-concurrent-streams", "max_concurrent_streams", "int",
              "streams open at once per connection; more are refused",
              "grpc.max_concurrent_streams"),
    LimitFlag("--grpc-max-header-list-size", "max_header_list_size", "int",
              "bytes of one decoded header block", "grpc.max_metadata_size"),
    LimitFlag("--grpc-max-message-size", "max_message_size", "int",
              "bytes of one request message, compressed or inflated",
              "grpc.max_receive_message_length"),
    LimitFlag("--grpc-max-buffered-input", "max_buffered_input", "int",
              "bytes of request messages held while they arrive, over all calls"),
    LimitFlag("--grpc-max-stream-requests-in-flight", "max_stream_requests_in_flight", "int",
              "requests of one ModelStreamInfer stream not yet answered; past it the stream "
              "is not read", servicer=True),
    LimitFlag("--grpc-http2-max-frame-size", "max_frame_size", "int",
              "bytes of one frame's payload (16384-16777215)", "grpc.http2.max_frame_size"),
    LimitFlag("--grpc-http2-stream-window-size", "stream_window_size", "int",
              "flow-control window granted per stream"),
    LimitFlag("--grpc-http2-connection-window-size", "connection_window_size", "int",
              "flow-control window granted per connection"),
    LimitFlag("--grpc-http2-max-continuation-frames", "max_continuation_frames", "int",
              "frames one header block may span"),
    LimitFlag("--grpc-http2-max-settings-entries", "max_settings_entries", "int",
              "entries of one SETTINGS frame"),
    LimitFlag("--grpc-http2-settings-budget", "settings_budget", "int",
              "SETTINGS frames in a burst (refills a tenth a second)"),
    LimitFlag("--grpc-http2-reset-budget", "reset_budget", "int",
              "streams reset by the client or refused, in a burst (refills a tenth a second)"),
    LimitFlag("--grpc-http2-max-queued-output", "max_queued_output", "int",
              "bytes queued for a client that does not read"),
    LimitFlag("--grpc-http2-handshake-timeout", "handshake_timeout", "ms",
              "ms to send the connection preface and SETTINGS"),
    LimitFlag("--grpc-http2-idle-timeout", "idle_timeout", "ms",
              "ms without streams or frames before GOAWAY and close (0: never)"),
    LimitFlag("--grpc-http2-frame-timeout", "frame_timeout", "ms",
              "ms a partly received frame may take to complete"),
    LimitFlag("--grpc-http2-close-timeout", "close_timeout", "ms",
              "ms a closing connection may keep unsent bytes before it is dropped"),
    LimitFlag("--grpc-keepalive-time", "keepalive_time", "ms",
              "ms of silence before the server pings a connection", "grpc.keepalive_time_ms",
              triton=True),
    LimitFlag("--grpc-keepalive-timeout", "keepalive_timeout", "ms",
              "ms to wait for the PING ACK before closing", "grpc.keepalive_timeout_ms",
              triton=True),
    LimitFlag("--grpc-keepalive-permit-without-calls", "keepalive_permit_without_calls", "bool",
              "allow client keepalive pings while no call is open",
              "grpc.keepalive_permit_without_calls",
              triton=True),
    LimitFlag("--grpc-http2-max-pings-without-data", "max_pings_without_data", "int",
              "server pings sent while no data is sent (0: no limit)",
              "grpc.http2.max_pings_without_data",
              triton=True),
    LimitFlag("--grpc-http2-min-recv-ping-interval-without-data",
              "min_recv_ping_interval_without_data", "ms",
              "ms a client must leave between pings while no data is sent, or get a strike",
              "grpc.http2.min_recv_ping_interval_without_data_ms",
              triton=True),
    LimitFlag("--grpc-http2-max-ping-strikes", "max_ping_strikes", "int",
              "strikes before GOAWAY ENHANCE_YOUR_CALM too_many_pings (0: no limit)",
              "grpc.http2.max_ping_strikes",
              triton=True),
    LimitFlag("--grpc-max-connection-age", "max_connection_age", "ms",
              "ms a connection may live before GOAWAY NO_ERROR (none: no limit)",
              "grpc.max_connection_age_ms",
              triton=True),
    LimitFlag("--grpc-max-connection-age-grace", "max_connection_age_grace", "ms",
              "ms for calls to finish after the age GOAWAY, then the close (none: no limit)",
              "grpc.max_connection_age_grace_ms",
              triton=True),
)  # fmt: skip


def from_arguments(args: argparse.Namespace) -> GrpcLimits:
    """The limits the parsed flags ask for; raises ValueError naming a flag out of range."""
    values = {}
    for flag in FLAGS:
        given = getattr(args, _dest(flag))
        if given is None:
            continue
        if flag.kind != "bool" and given < 0:
            raise ValueError(f"{flag.name} must not be negative, got {given}")
        values[flag.field] = given / 1000 if flag.kind == "ms" else given
    # Triton's flag, parsed (and refused when <= 0) with the other Triton flags
    values["max_response_pool_size"] = getattr(args, "grpc_max_response_pool_size", None)
    return checked(GrpcLimits(**values))


def checked(limits: GrpcLimits) -> GrpcLimits:
    """``limits`` when they make a working server; raises ValueError naming the flag otherwise."""
    if not 16_384 <= limits.max_frame_size <= (1 << 24) - 1:
        raise ValueError(
            "--grpc-http2-max-frame-size must be within 16384-16777215,"
            f" got {limits.max_frame_size}"
        )
    for field, low in (
        ("max_connections", 1),
        ("max_concurrent_streams", 1),
        ("max_header_list_size", 1024),
        ("max_message_size", 1),
        ("max_buffered_input", 1),
        ("max_stream_requests_in_flight", 1),
        ("stream_window_size", 65_535),
        ("connection_window_size", 65_535),
        ("max_continuation_frames", 1),
        ("max_settings_entries", 6),
        ("settings_budget", 1),
        ("reset_budget", 1),
        ("max_queued_output", 65_536),
    ):
        value = getattr(limits, field)
        if value < low:
            raise ValueError(f"{_flag_of(field).name} must be at least {low}, got {value}")
    for field in ("stream_window_size", "connection_window_size"):
        if getattr(limits, field) > 2**31 - 1:
            raise ValueError(f"{_flag_of(field).name} must be at most 2147483647")
    for field in (
        "handshake_timeout",
        "frame_timeout",
        "close_timeout",
        "keepalive_time",
        "keepalive_timeout",
    ):
        if getattr(limits, field) <= 0:
            raise ValueError(f"{_flag_of(field).name} must be more than 0")
    return limits


def grpcio_options(limits: GrpcLimits) -> list[tuple[str, int]]:
    """The grpcio channel arguments of ``limits``; raises ValueError for a flag grpcio lacks."""
    options = []
    for flag in FLAGS:
        value = getattr(limits, flag.field)
        if flag.servicer:
            continue
        if flag.grpcio_option is None:
            if value != getattr(DEFAULT_LIMITS, flag.field):
                raise ValueError(f"{flag.name} applies to --grpc-transport http2 only")
            continue
        if value is None:
            continue
        options.append((flag.grpcio_option, int(_as_flag_value(flag, value))))
    interval = dict(options)["grpc.http2.min_recv_ping_interval_without_data_ms"]
    options.append(("grpc.http2.min_ping_interval_without_data_ms", interval))  # older grpcio
    return options


def _as_flag_value(flag: LimitFlag, value: float | int | bool) -> int:
    return round(value * 1000) if flag.kind == "ms" else int(value)


def _dest(flag: LimitFlag) -> str:
    return flag.name.lstrip("-").replace("-", "_")


def _flag_of(field: str) -> LimitFlag:
    return next(flag for flag in FLAGS if flag.field == field)
