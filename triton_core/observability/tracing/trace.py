"""One sampled request's trace: timestamps stored as they happen, written when it ends.

A trace has Triton's ``id``; ensemble steps and BLS calls made for a traced request get
child traces (their own ``id``, ``parent_id`` the parent's). The traces of one request form
a group written together, in Triton's trace-file JSON, once the frontend has answered and
every child has ended; in opentelemetry mode each becomes spans instead (``otel.py``).

Every method runs on the event loop; stores are O(1) (tensor records are formatted only at
the TENSORS level).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from time import monotonic_ns
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from triton_core.observability.tracing.settings import TraceLevel

if TYPE_CHECKING:
    from triton_core.observability.statistics import ExecutionTimes

_COMPACT = {"separators": (",", ":"), "ensure_ascii": False}


class TracedTensor(Protocol):
    """What a TENSORS-level record shows of a tensor (a :class:`~triton_core.Tensor`)."""

    @property
    def name(self) -> str: ...
    @property
    def datatype(self) -> str: ...
    @property
    def data(self) -> Any: ...


class TraceOutput(Protocol):
    """Where a sampled request's traces go: the setting in force when it was sampled
    (:class:`~.tracer.TraceSetting`), its level and its file."""

    level: TraceLevel

    def write(self, records: str) -> None: ...


class _Group:
    """The traces of one request (the frontend's and its children), written together."""

    __slots__ = ("next_id", "open", "setting", "traces")

    def __init__(self, next_id: Callable[[], int], setting: TraceOutput) -> None:
        self.next_id = next_id
        self.setting = setting
        self.traces: list[Trace] = []
        self.open = 0


class Trace:
    """The timestamps (and tensors) of one request to one model."""

    __slots__ = (
        "__weakref__",
        "_group",
        "_records",
        "id",
        "level",
        "model_name",
        "model_version",
        "parent",
        "parent_id",
        "request_id",
        "spans",
    )

    def __init__(self, group: _Group, trace_id: int, parent: Trace | None) -> None:
        self._group = group
        self.id = trace_id
        self.parent = parent
        self.parent_id = 0 if parent is None else parent.id
        self.level = group.setting.level
        self.model_name = ""
        self.model_version = -1
        self.request_id = ""
        self._records: list[str] = []
        #: the opentelemetry spans of this trace (opentelemetry mode only)
        self.spans: Any = None
        group.traces.append(self)
        group.open += 1

    @classmethod
    def new(cls, next_id: Callable[[], int], setting: TraceOutput) -> Trace:
        """The frontend's trace of a newly sampled request; ``next_id`` numbers its traces
        (the tracer sets :attr:`spans` in opentelemetry mode)."""
        return cls(_Group(next_id, setting), next_id(), None)

    def child(self) -> Trace:
        """A trace for a request made on behalf of this one (ensemble step, BLS call)."""
        trace = Trace(self._group, self._group.next_id(), self)
        if self.spans is not None:
            trace.spans = self.spans.child(trace)
        return trace

    @property
    def opentelemetry(self) -> bool:
        return self.spans is not None

    def context(self) -> str:
        """The W3C trace context a BLS request passes on (opentelemetry mode), else ""."""
        return "" if self.spans is None else self.spans.context()

    # -- what the pipeline stores -----------------------------------------------------------

    def timestamp(self, name: str, ns: int | None = None) -> None:
        """A frontend or pipeline activity (``HTTP_RECV_START``, ``QUEUE_START`` ...)."""
        if ns is None:
            ns = monotonic_ns()
        if not self.level & TraceLevel.TIMESTAMPS:
            return
        if self.spans is not None:
            self.spans.event(name, ns)
            return
        self._records.append(f'{{"id":{self.id},"timestamps":[{{"name":"{name}","ns":{ns}}}]}}')

    def request_start(self, model_name: str, version: int, request_id: str) -> None:
        """The server accepted the request for ``model_name`` ``version``."""
        now = monotonic_ns()
        self.model_name, self.model_version, self.request_id = model_name, version, request_id
        if self.spans is not None:
            if self.level & TraceLevel.TIMESTAMPS:
                self.spans.request_start(now)
            return
        header: dict[str, Any] = {"id": self.id, "model_name": model_name}
        header["model_version"] = version
        if request_id:
            header["request_id"] = request_id
        if self.parent_id:
            header["parent_id"] = self.parent_id
        self._records.append(json.dumps(header, **_COMPACT))  # type: ignore[arg-type]
        self.timestamp("REQUEST_START", now)

    def compute(self, times: ExecutionTimes) -> None:
        """The instance's execution of the batch this request was in (as measured)."""
        start = times.start_ns
        input_end = start + times.input_ns
        output_start = input_end + times.infer_ns
        end = output_start + times.output_ns
        if self.spans is not None:
            if self.level & TraceLevel.TIMESTAMPS:
                self.spans.compute(start, input_end, output_start, end)
            return
        self.timestamp("COMPUTE_START", start)
        self.timestamp("COMPUTE_INPUT_END", input_end)
        self.timestamp("COMPUTE_OUTPUT_START", output_start)
        self.timestamp("COMPUTE_END", end)

    def tensors(self, activity: str, tensors: Iterable[TracedTensor]) -> None:
        """``TENSOR_QUEUE_INPUT`` / ``TENSOR_BACKEND_OUTPUT`` records (TENSORS level)."""
        if not self.level & TraceLevel.TENSORS or self.spans is not None:
            return
        for tensor in tensors:
            record = {
                "id": self.id,
                "activity": activity,
                "tensor": {
                    "name": tensor.name,
                    "data": tensor_text(tensor.datatype, tensor.data),
                    "shape": ",".join(str(dim) for dim in np.shape(tensor.data)),
                    "dtype": tensor.datatype,
                },
            }
            self._records.append(json.dumps(record, **_COMPACT))  # type: ignore[arg-type]

    def request_end(self) -> None:
        """The server is done with the request: its trace ends (a child's group may write)."""
        self.timestamp("REQUEST_END")
        if self.spans is not None:
            self.spans.request_end()
        if self.parent is not None:
            self._close()

    def end(self) -> None:
        """The frontend has answered: the request's trace ends."""
        if self.spans is not None:
            self.spans.end()
        self._close()

    def _close(self) -> None:
        group = self._group
        group.open -= 1
        if group.open:
            return
        if self.spans is None:
            records = [record for trace in group.traces for record in trace._records]
            if records:
                group.setting.write(",".join(records))
        group.traces = []


def tensor_text(datatype: str, data: Any) -> str:
    """A tensor's values as Triton writes them in a trace: comma-separated, BYTES quoted."""
    array = np.asarray(data)
    if datatype in ("FP16", "BF16"):
        return ""  # Triton writes no values for these
    flat = array.reshape(-1)
    if datatype == "BYTES":
        return ",".join(f'"{_bytes_text(value)}"' for value in flat)
    if datatype == "BOOL":
        return ",".join("1" if value else "0" for value in flat.tolist())
    if datatype in ("FP32", "FP64"):
        return ",".join(format(value, "g") for value in flat.tolist())
    return ",".join(str(value) for value in flat.tolist())


def _bytes_text(value: Any) -> str:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    return str(value)
