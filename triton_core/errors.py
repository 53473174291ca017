"""Errors as values with a status, mapped to HTTP and gRPC codes by the frontends."""

from __future__ import annotations

import enum


class Status(enum.Enum):
    """Triton's error codes (TRITONSERVER_ERROR_*), with their HTTP status and gRPC code name."""

    UNKNOWN = (400, "UNKNOWN")
    INTERNAL = (500, "INTERNAL")
    NOT_FOUND = (404, "NOT_FOUND")
    INVALID_ARG = (400, "INVALID_ARGUMENT")
    UNAVAILABLE = (503, "UNAVAILABLE")
    UNSUPPORTED = (501, "UNIMPLEMENTED")
    ALREADY_EXISTS = (400, "ALREADY_EXISTS")
    CANCELLED = (400, "CANCELLED")

    @property
    def http_status(self) -> int:
        return self.value[0]

    @property
    def grpc_code_name(self) -> str:
        """Name of the matching ``grpc.StatusCode`` member."""
        return self.value[1]


class TritonError(Exception):
    """An error with a Triton status; its message is what clients see."""

    #: True when the backend reported its request a success although the answer is this error:
    #: Triton's Python backend counts a response that carries an error as a success (only an
    #: execute that fails the batch is a failure); set per instance, so errors cost nothing more
    counts_as_success = False

    def __init__(self, status: Status, message: str, *, reason: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        #: why the request failed, for statistics and metrics: REJECTED, CANCELED, BACKEND or
        #: OTHER (None: decided from the status)
        self.reason = reason

    @property
    def failure_reason(self) -> str:
        if self.reason is not None:
            return self.reason
        return "CANCELED" if self.status is Status.CANCELLED else "OTHER"

    def __repr__(self) -> str:
        return f"TritonError({self.status.name}, {self.message!r})"

    def __reduce__(self) -> tuple[object, ...]:
        # pickled to another process (Ray, multiprocessing): rebuilt with its status, message
        # and reason, which the default (``args`` only) would not pass to ``__init__``
        return type(self), (self.status, self.message), self.__dict__


def invalid_arg(message: str) -> TritonError:
    return TritonError(Status.INVALID_ARG, message)


def internal(message: str) -> TritonError:
    return TritonError(Status.INTERNAL, message)


def unavailable(message: str) -> TritonError:
    return TritonError(Status.UNAVAILABLE, message)


def unsupported(message: str) -> TritonError:
    return TritonError(Status.UNSUPPORTED, message)


def not_found(message: str) -> TritonError:
    return TritonError(Status.NOT_FOUND, message)
