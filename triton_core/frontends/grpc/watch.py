"""What an HTTP/2 client may do over time, and what it must do in time, on one connection.

A :class:`ConnectionWatch` holds the connection's deadlines, which a periodic check (the
connection's timer) compares against: the preface and SETTINGS, a frame begun, idleness,
the answer to a keepalive PING and the connection's age. It also decides when this side
sends a keepalive PING, applies gRPC's policy to the client's own pings, and keeps the
budgets of streams reset or refused and of SETTINGS frames a client may spend in a burst.
The connection hands it what it counts (reads, answer frames sent) and acts on its answers:
an :class:`~.frames.Http2Error` is the GOAWAY to send.
"""

from __future__ import annotations

import struct
from typing import Literal

from triton_core.frontends.grpc.frames import (
    ENHANCE_YOUR_CALM,
    NO_ERROR,
    PROTOCOL_ERROR,
    Http2Error,
)
from triton_core.frontends.grpc.limits import GrpcLimits


class Budget:
    """A token bucket: ``capacity`` events at once, refilled by a tenth of it a second; an
    event over it is the client's abuse of ``what`` (``flag`` sets the capacity)."""

    __slots__ = ("_capacity", "_flag", "_rate", "_stamp", "_tokens", "_what")

    def __init__(self, capacity: int, now: float, what: str, flag: str) -> None:
        self._capacity = float(capacity)
        self._rate = capacity / 10
        self._tokens = float(capacity)
        self._stamp = now
        self._what = what
        self._flag = flag

    def spend(self, now: float) -> None:
        """One event; raises :class:`~.frames.Http2Error` ENHANCE_YOUR_CALM when none is left."""
        tokens = min(self._capacity, self._tokens + (now - self._stamp) * self._rate)
        self._stamp = now
        if tokens < 1:
            self._tokens = tokens
            raise Http2Error(
                ENHANCE_YOUR_CALM,
                f"more than {int(self._capacity)} {self._what} in a burst ({self._flag})",
            )
        self._tokens = tokens - 1


class ConnectionWatch:
    """The deadlines, pings and burst budgets of one connection (see the module)."""

    __slots__ = (
        "_age_deadline",
        "_created",
        "_keepalive_out",
        "_keepalive_pings",
        "_last_ping_at",
        "_last_read_at",
        "_limits",
        "_ping_strikes",
        "_reads_seen",
        "_sent_at_keepalive",
        "_sent_at_last_ping",
        "interval",
        "resets",
        "settings",
    )

    def __init__(self, limits: GrpcLimits, now: float) -> None:
        self._limits = limits
        #: streams the client reset or had refused: rapid reset, when many in a burst
        self.resets = Budget(
            limits.reset_budget, now, "streams reset or refused", "--grpc-http2-reset-budget"
        )
        #: SETTINGS frames from the client
        self.settings = Budget(
            limits.settings_budget, now, "SETTINGS frames", "--grpc-http2-settings-budget"
        )
        self._created = now
        self._reads_seen = 0  # the connection's reads at the last check
        self._last_read_at = now
        self._ping_strikes = 0
        self._last_ping_at = float("-inf")
        self._sent_at_last_ping = 0
        self._keepalive_out: tuple[bytes, float] | None = None  # payload, sent at
        self._keepalive_pings = 0  # sent since the last answer frame
        self._sent_at_keepalive = 0
        self._age_deadline: float | None = None  # when the age GOAWAY's grace ends
        #: how often the connection checks: see :func:`_tick_interval`
        self.interval = _tick_interval(limits)

    def overdue(
        self,
        now: float,
        reads: int,
        settings_seen: bool,
        partial_since: float | None,
        idle: bool,
    ) -> Http2Error | None:
        """The deadline the connection missed, if any. ``reads``: the connection's reads so
        far; ``partial_since``: when the frame still incomplete began to arrive (None: none
        is); ``idle``: no stream is open."""
        if reads != self._reads_seen:
            self._reads_seen = reads
            self._last_read_at = now
        limits = self._limits
        if not settings_seen and now - self._created > limits.handshake_timeout:
            return Http2Error(
                PROTOCOL_ERROR,
                f"no preface and SETTINGS within {limits.handshake_timeout:g} s"
                " (--grpc-http2-handshake-timeout)",
            )
        if partial_since is not None and now - partial_since > limits.frame_timeout:
            return Http2Error(
                PROTOCOL_ERROR,
                f"a frame incomplete after {limits.frame_timeout:g} s (--grpc-http2-frame-timeout)",
            )
        if limits.idle_timeout and idle and now - self._last_read_at > limits.idle_timeout:
            return Http2Error(NO_ERROR, "idle")
        if self._keepalive_out is not None and now - self._keepalive_out[1] > (
            limits.keepalive_timeout
        ):
            return Http2Error(NO_ERROR, "keepalive watchdog timeout")
        return None

    def keepalive_ping(self, now: float, reads: int, sent: int) -> bytes | None:
        """The payload of the keepalive PING to send now, if one is due. ``sent``: the
        answer frames the connection sent so far (pings between them are limited)."""
        limits = self._limits
        if self._keepalive_out is not None or now - self._last_read_at < limits.keepalive_time:
            return None
        if sent != self._sent_at_keepalive:
            self._sent_at_keepalive = sent
            self._keepalive_pings = 0
        if limits.max_pings_without_data and (
            self._keepalive_pings >= limits.max_pings_without_data
        ):
            return None
        self._keepalive_pings += 1
        payload = struct.pack(">Q", reads)
        self._keepalive_out = (payload, now)
        return payload

    def ping_acked(self, payload: bytes) -> None:
        """The client answered a PING of this side's."""
        if self._keepalive_out is not None and payload == self._keepalive_out[0]:
            self._keepalive_out = None

    def age(self, now: float) -> Literal["go_away", "close"] | None:
        """What the connection's age asks for now: ``go_away`` once it reaches the max age,
        ``close`` once the grace after that is over."""
        limits = self._limits
        if limits.max_connection_age is None:
            return None
        if self._age_deadline is None:
            if now - self._created >= limits.max_connection_age:
                grace = limits.max_connection_age_grace
                self._age_deadline = now + grace if grace is not None else float("inf")
                return "go_away"
        elif now >= self._age_deadline:
            return "close"
        return None

    def police_ping(self, now: float, sent: int, streams_open: bool) -> None:
        """gRPC's ping policy: a ping sooner than allowed is a strike; too many end it all."""
        limits = self._limits
        if sent != self._sent_at_last_ping:  # answers went out since: a fresh start
            self._sent_at_last_ping = sent
            self._ping_strikes = 0
            self._last_ping_at = float("-inf")
        if not streams_open and not limits.keepalive_permit_without_calls:
            interval = 7200.0  # no call to keep alive: one ping in two hours, as gRPC allows
        else:
            interval = limits.min_recv_ping_interval_without_data
        too_soon = now < self._last_ping_at + interval
        self._last_ping_at = now
        if not too_soon:
            return
        self._ping_strikes += 1
        if limits.max_ping_strikes and self._ping_strikes > limits.max_ping_strikes:
            raise Http2Error(ENHANCE_YOUR_CALM, "too_many_pings")


def _tick_interval(limits: GrpcLimits) -> float:
    """Often enough to meet the shortest deadline within a quarter of it, at most once a second."""
    deadlines = [
        limits.handshake_timeout,
        limits.frame_timeout,
        limits.keepalive_time,
        limits.keepalive_timeout,
    ]
    deadlines += [t for t in (limits.idle_timeout, limits.max_connection_age) if t]
    if limits.max_connection_age_grace:
        deadlines.append(limits.max_connection_age_grace)
    return min(1.0, max(0.02, min(deadlines) / 4))
