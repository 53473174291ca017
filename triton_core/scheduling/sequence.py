"""The sequence batcher (built-in plugin): stateful models, whose requests come in sequences.

Requests that share a correlation ID form a sequence: the first sets START, the last END.
Each live sequence owns one *slot* of one model instance for its life, so its requests run
on that instance, one at a time and in order. The scheduler tells the model about them
through control inputs it adds to each request (START, END, READY, CORRID) and, for models
with implicit state, keeps each sequence's state tensors between its requests.

Strategies (``sequence_batching { direct {} }``, the default, or ``oldest {}``):

* direct: an instance has ``max_batch_size`` slots (1 without batching) and a batch holds at
  most one request per slot, in slot order. When the model declares a READY control, a batch
  keeps each request at its slot's position and fills the gaps below the highest busy slot
  with *not-ready* requests (READY false, zeros elsewhere), as Triton does, so a model that
  keeps per-slot state sees a stable position. Without a READY control the model could not
  tell such filler from a real request, so none is sent: the batch holds the ready slots
  only (identify sequences by CORRID then). ``max_queue_delay_microseconds`` with
  ``minimum_slot_utilization`` > 0 holds a batch back until enough slots are ready.
* oldest: an instance has ``max_candidate_sequences`` slots (default ``max_batch_size``);
  batches are formed like the dynamic batcher's, from the oldest waiting requests, with at
  most one request per sequence, preferred sizes and ``max_queue_delay_microseconds``.

Sequences that find every slot taken wait in a backlog, in arrival order, and take the next
freed slot. A slot is freed when its sequence's END request has run, or when the sequence
has been idle for ``max_sequence_idle_microseconds``: idle time counts from the last
request's arrival or completion, whichever is later, and a sequence with a request waiting
or running never expires (Triton counts from arrival only, so a slow model can lose a live
sequence). A request for an expired sequence without START gets Triton's START error.

Implicit state (``sequence_batching { state [...] }``): the first request of a sequence gets
the initial state (``initial_state`` zeros or file, else zeros with variable dims as 1), each
later one gets what the previous request returned as ``output_name``. A backend that supports
it returns every state output when a request asks for all outputs or names it. The state
output reaches the client only when the config lists it in ``output`` and the client asked
for it (all outputs, or by name), as in Triton; otherwise it is removed from the response.

Iterative sequences (``iterative_sequence: true``, Triton's): a request without a
correlation ID gets one of its own, with START. When the backend releases it with RESCHEDULE
(``InferenceRequest.reschedule``), it goes back to its sequence's queue, in the same slot,
with neither START nor END; a decoupled model goes on with the same response sender. Any
other completion ends the sequence.

Not-ready filler requests have ``batch_size`` 0, so they add to execution counts but not to
inference counts in the statistics.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from time import monotonic_ns
from typing import TYPE_CHECKING, Any

import numpy as np

from triton_core.config import wire_datatype
from triton_core.errors import TritonError, internal, invalid_arg, unavailable
from triton_core.plugins.hookspecs import hookimpl
from triton_core.protos.model_config_pb2 import DataType, ModelSequenceBatching
from triton_core.repository.layout import is_within
from triton_core.scheduling.base import Scheduler, SchedulerContext
from triton_core.tensors.dtypes import NUMPY_DTYPES, deserialize_bytes, element_count
from triton_core.types import InferenceRequest, RequestedOutput, RequestFlag, Tensor

if TYPE_CHECKING:
    from triton_core.plugins.registry import SchedulerRegistry
    from triton_core.protos.model_config_pb2 import ModelConfig
    from triton_core.types import InferenceResponse

logger = logging.getLogger(__name__)

_Control = ModelSequenceBatching.Control
_START = RequestFlag.SEQUENCE_START
_END = RequestFlag.SEQUENCE_END
#: folder under the model folder that holds ``initial_state`` data files
INITIAL_STATE_FOLDER = "initial_state"

CorrelationId = int | str


# -- what the config asks for, prepared once at load --------------------------------------------


@dataclass(frozen=True, slots=True)
class _State:
    """One implicit state: the tensor fed as ``input_name`` and read back from ``output_name``."""

    input_name: str
    output_name: str
    datatype: str
    #: the state a sequence starts with (read-only; shared by all sequences)
    initial: np.ndarray
    #: the config lists ``output_name`` in ``output``, so clients may ask for it
    listed: bool


class _Controls:
    """The control tensors of a model, built once: requests share these read-only arrays."""

    def __init__(self, config: ModelConfig) -> None:
        self.shape = (1, 1) if config.max_batch_size > 0 else (1,)
        # by (START, END) bits of the request flags: continue, start, end, start+end
        self.by_flags: list[dict[str, Tensor]] = [{}, {}, {}, {}]
        self.not_ready: dict[str, Tensor] = {}
        self.has_ready = False
        #: (input name, wire datatype) of the CORRID control, if any
        self.corrid: tuple[str, str] | None = None
        for control_input in config.sequence_batching.control_input:
            control = control_input.control[0]
            name = control_input.name
            if control.kind == _Control.CONTROL_SEQUENCE_CORRID:
                self.corrid = (name, wire_datatype(control.data_type))
                self.not_ready[name] = self._corrid_tensor(name, self.corrid[1], None)
                continue
            false, true = self._false_true(name, control)
            if control.kind == _Control.CONTROL_SEQUENCE_READY:
                self.has_ready = True
                values = (true, true, true, true)
            elif control.kind == _Control.CONTROL_SEQUENCE_START:
                values = (false, true, false, true)
            else:  # END
                values = (false, false, true, true)
            for tensors, value in zip(self.by_flags, values, strict=True):
                tensors[name] = value
            self.not_ready[name] = false

    def _false_true(self, name: str, control: ModelSequenceBatching.Control) -> list[Tensor]:
        values: list[float]  # int, float or bool, as the control's datatype says
        if len(control.int32_false_true):
            datatype, values = "INT32", list(control.int32_false_true)
        elif len(control.fp32_false_true):
            datatype, values = "FP32", list(control.fp32_false_true)
        else:
            datatype, values = "BOOL", list(control.bool_false_true)
        tensors = []
        for value in values:
            array = np.full(self.shape, value, dtype=NUMPY_DTYPES[datatype])
            array.flags.writeable = False
            tensors.append(Tensor(name, datatype, array))
        return tensors

    def _corrid_tensor(self, name: str, datatype: str, value: CorrelationId | None) -> Tensor:
        if datatype == "BYTES":
            array = np.empty(self.shape, dtype=object)
            array.flat[0] = value.encode() if isinstance(value, str) else b""
        else:
            # uint64 ids wrap into 32-bit or signed CORRID types, as Triton's casts do
            # (a string id for an integer CORRID is refused before: _check_corrid_type)
            number = value if isinstance(value, int) else 0
            raw = np.full(self.shape, number & 0xFFFF_FFFF_FFFF_FFFF, dtype=np.uint64)
            array = raw.astype(NUMPY_DTYPES[datatype])
        array.flags.writeable = False
        return Tensor(name, datatype, array)

    def corrid_tensor(self, correlation_id: CorrelationId) -> Tensor | None:
        if self.corrid is None:
            return None
        return self._corrid_tensor(*self.corrid, correlation_id)


def _read_states(config: ModelConfig, model_dir: Path | None) -> list[_State]:
    listed = {tensor.name for tensor in config.output}
    batch = (1,) if config.max_batch_size > 0 else ()
    states = []
    for state in config.sequence_batching.state:
        datatype = wire_datatype(state.data_type)
        if state.initial_state:
            initial = state.initial_state[0]
            shape = batch + tuple(initial.dims)
            if initial.WhichOneof("state_data") == "data_file":
                array = _read_state_file(config.name, state, shape, datatype, model_dir)
            else:
                array = _zeros(shape, datatype)
        else:
            # Triton leaves this uninitialised; zeros are as good and reproducible.
            array = _zeros(batch + tuple(1 if dim == -1 else dim for dim in state.dims), datatype)
        array.flags.writeable = False
        states.append(
            _State(
                state.input_name,
                state.output_name,
                datatype,
                array,
                state.output_name in listed,
            )
        )
    return states


def _zeros(shape: tuple[int, ...], datatype: str) -> np.ndarray:
    if datatype == "BYTES":
        return np.full(shape, b"", dtype=object)
    return np.zeros(shape, dtype=NUMPY_DTYPES[datatype])


def _read_state_file(
    model: str,
    state: ModelSequenceBatching.State,
    shape: tuple[int, ...],
    datatype: str,
    model_dir: Path | None,
) -> np.ndarray:
    initial = state.initial_state[0]
    where = f"model '{model}': sequence_batching state '{state.input_name}' initial_state"
    if model_dir is None:
        raise invalid_arg(f"{where}: 'data_file' needs the model folder, which is unknown")
    folder = model_dir / INITIAL_STATE_FOLDER
    path = folder / initial.data_file
    if not is_within(path, folder):
        raise invalid_arg(
            f"{where}: 'data_file' '{initial.data_file}' is outside the model's "
            f"'{INITIAL_STATE_FOLDER}' folder"
        )
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise invalid_arg(f"{where}: cannot read 'data_file' {path}: {exc}") from None
    count = element_count(shape)
    if datatype == "BYTES":
        try:
            return deserialize_bytes(data, count).reshape(shape)
        except ValueError as exc:
            raise invalid_arg(
                f"{where}: 'data_file' {path} is not {count} length-prefixed strings: {exc}"
            ) from None
    dtype = NUMPY_DTYPES[datatype]
    expected = count * dtype.itemsize
    if len(data) < expected:
        raise invalid_arg(
            f"{where}: 'data_file' {path} holds {len(data)} bytes but dims {list(shape)} of "
            f"{DataType.Name(state.data_type)} need {expected}"
        )
    return np.frombuffer(data[:expected], dtype=dtype).reshape(shape)


# -- runtime objects -----------------------------------------------------------------------------


class _Entry:
    """One accepted request waiting in (or taken from) its sequence's queue."""

    __slots__ = ("arrival", "future", "request", "sequence", "strip")

    def __init__(
        self,
        request: InferenceRequest,
        future: asyncio.Future[InferenceResponse],
        sequence: _Sequence,
        arrival: float,
        strip: tuple[str, ...],
    ) -> None:
        self.request = request
        self.future = future
        self.sequence = sequence
        self.arrival = arrival
        #: state outputs to remove from the response (the client did not ask for them)
        self.strip = strip


class _Sequence:
    __slots__ = ("corrid", "corrid_tensor", "queue", "running", "slot", "state", "timer")

    def __init__(self, corrid: CorrelationId, corrid_tensor: Tensor | None) -> None:
        self.corrid = corrid
        self.corrid_tensor = corrid_tensor
        self.queue: deque[_Entry] = deque()
        #: a request of this sequence is executing
        self.running = False
        self.slot: _Slot | None = None
        #: implicit state tensors by state input name; None until the first request runs
        self.state: dict[str, np.ndarray] | None = None
        #: fires when the sequence has been idle for max_sequence_idle_microseconds
        self.timer: asyncio.TimerHandle | None = None


class _Slot:
    __slots__ = ("index", "instance", "sequence")

    def __init__(self, instance: int, index: int) -> None:
        self.instance = instance
        self.index = index
        self.sequence: _Sequence | None = None


class _BatchEnd(asyncio.Future):
    """The future of a batch's last request. The pool resolves a batch's futures in order,
    so the batch is done the moment this one is: ``on_done`` runs then, not a loop turn
    later, so that an instance's next batch (an iterative sequence's next step) goes out
    before the loop writes the responses the model streamed during the batch."""

    def __init__(self, loop: asyncio.AbstractEventLoop, on_done: Callable[[], None]) -> None:
        super().__init__(loop=loop)
        self._on_done: Callable[[], None] | None = on_done
        # resolved some other way (cancelled): the done callbacks still tell
        self.add_done_callback(lambda _: self.fire())

    def set_result(self, result: Any) -> None:
        super().set_result(result)
        self.fire()

    def set_exception(self, exception: Any) -> None:
        super().set_exception(exception)
        self.fire()

    def fire(self) -> None:
        on_done, self._on_done = self._on_done, None
        if on_done is not None:
            on_done()


class _Instance:
    __slots__ = ("busy", "forming", "index", "slots", "submitting", "timer")

    def __init__(self, index: int, slots: int) -> None:
        self.index = index
        self.slots = [_Slot(index, slot) for slot in range(slots)]
        #: a batch of this instance is executing (one at a time, so sequences stay in order)
        self.busy = False
        #: a batch is being formed (guards against re-entry when forming frees slots)
        self.forming = False
        #: a batch is being handed to the pool (one answered at once waits a loop turn)
        self.submitting = False
        #: the queue-delay timer
        self.timer: asyncio.TimerHandle | None = None


# -- the scheduler -------------------------------------------------------------------------------


class SequenceBatcher(Scheduler):
    """``sequence_batching``: slots, control inputs, implicit state, shared by the two
    strategies (:class:`DirectSequenceBatcher`, :class:`OldestSequenceBatcher`), which form
    the batches (:meth:`_form`)."""

    def __init__(self, context: SchedulerContext, slots: int, delay_s: float) -> None:
        config = context.config
        batching = config.sequence_batching
        self._model = config.name
        #: iterative_sequence: each request is a sequence, run again while its model
        #: reschedules it; requests without a correlation ID get one of their own
        self._iterative = batching.iterative_sequence
        self._next_id = 1
        self._pool = context.pool
        self._loop = context.loop
        self._statistics = context.statistics
        self._batching = config.max_batch_size > 0
        self._max_batch = max(1, config.max_batch_size)
        self._idle_s = (batching.max_sequence_idle_microseconds or 1_000_000) / 1e6
        self._delay = delay_s
        self._controls = _Controls(config)
        self._states = _read_states(config, context.model_dir)
        self._initial = {state.input_name: state.initial for state in self._states}
        self._ragged = frozenset(t.name for t in config.input if t.allow_ragged_batch)
        self._instances = [_Instance(index, slots) for index in range(self._pool.size)]
        # Free slots, lowest slot index first, so sequences spread over instances first and
        # direct batches stay dense.
        self._free = [(slot, index) for slot in range(slots) for index in range(self._pool.size)]
        heapq.heapify(self._free)
        self._live: dict[CorrelationId, _Sequence] = {}
        self._backlog: deque[_Sequence] = deque()
        self._pending = 0
        self._stopping = False
        self._drained: asyncio.Event | None = None
        self._pool.pin()

    def _form(self, instance: _Instance, ready: list[_Sequence], deadline_passed: bool) -> None:
        """Submit a batch of ``ready`` (sequences of ``instance`` with a request waiting, in
        slot order) to the instance, or arm its timer to wait for more."""
        raise NotImplementedError

    def _answer(
        self, future: asyncio.Future[InferenceResponse]
    ) -> asyncio.Future[InferenceResponse]:
        """The future the caller of :meth:`enqueue` waits on for ``future``'s answer."""
        return future

    # -- accepting -----------------------------------------------------------------------------

    def enqueue(self, request: InferenceRequest) -> asyncio.Future[InferenceResponse]:
        model = self._model
        if self._stopping:
            raise unavailable(f"model '{model}' is unloading and accepts no new requests")
        if request.batch_size > 1:
            raise invalid_arg(
                f"inference request to model '{model}' must specify batch-size 1 due to "
                "requirements of sequence batcher"
            )
        correlation_id = request.correlation_id
        if not correlation_id and self._iterative:
            correlation_id = request.correlation_id = self._own_id()
            request.flags |= _START
        if not correlation_id:
            raise invalid_arg(
                f"inference request to model '{model}' must specify a non-zero or non-empty "
                "correlation ID"
            )
        flags = request.flags
        sequence = self._live.get(correlation_id)
        if sequence is None:
            if not flags & _START:
                raise invalid_arg(
                    f"inference request for sequence {correlation_id} to model '{model}' must "
                    "specify the START flag on the first request of the sequence"
                )
            sequence = self._start_sequence(correlation_id)
        else:
            if flags & _START:
                logger.warning(
                    "sequence %s for model '%s' has a conflict: the previous sequence did not "
                    "end before this sequence start, so it continues as the new one",
                    correlation_id,
                    model,
                )
            if sequence.timer is not None:
                sequence.timer.cancel()
                sequence.timer = None
        if flags & _END:
            # Later requests with this id need START: they belong to a new sequence.
            del self._live[correlation_id]
        future: asyncio.Future[InferenceResponse] = self._loop.create_future()
        entry = _Entry(request, future, sequence, self._loop.time(), self._strip(request))
        sequence.queue.append(entry)
        self._pending += 1
        if sequence.slot is not None:
            self._kick(sequence.slot.instance)
        return self._answer(future)

    def _own_id(self) -> int:
        """An unused correlation ID for an iterative request that has none (as Triton's
        counter, skipping the IDs that clients' live sequences use)."""
        while self._next_id in self._live:
            self._next_id += 1
        self._next_id += 1
        return self._next_id - 1

    def _start_sequence(self, correlation_id: CorrelationId) -> _Sequence:
        self._check_corrid_type(correlation_id)
        sequence = _Sequence(correlation_id, self._controls.corrid_tensor(correlation_id))
        self._live[correlation_id] = sequence
        if self._free:
            slot, instance = heapq.heappop(self._free)
            self._assign(sequence, self._instances[instance].slots[slot])
        else:
            self._backlog.append(sequence)
        return sequence

    def _check_corrid_type(self, correlation_id: CorrelationId) -> None:
        corrid = self._controls.corrid
        if corrid is None:
            return
        name, datatype = corrid
        is_string = isinstance(correlation_id, str)
        if is_string == (datatype == "BYTES"):
            return
        kind, wanted = ("a string", "an integer") if is_string else ("an integer", "a string")
        raise invalid_arg(
            f"inference request for sequence {correlation_id} to model '{self._model}' has "
            f"{kind} correlation ID, but the model's CONTROL_SEQUENCE_CORRID input '{name}' is "
            f"{'TYPE_STRING' if datatype == 'BYTES' else 'TYPE_' + datatype}; use {wanted} "
            "sequence ID"
        )

    def _strip(self, request: InferenceRequest) -> tuple[str, ...]:
        """State outputs the client did not ask for; makes sure the backend returns them."""
        if not self._states:
            return ()
        requested = request.outputs
        strip = []
        for state in self._states:
            if requested is None:
                if not state.listed:
                    strip.append(state.output_name)
            elif all(output.name != state.output_name for output in requested):
                requested.append(RequestedOutput(state.output_name))
                strip.append(state.output_name)
        return tuple(strip)

    # -- slots ---------------------------------------------------------------------------------

    def _assign(self, sequence: _Sequence, slot: _Slot) -> None:
        slot.sequence = sequence
        sequence.slot = slot

    def _release(self, sequence: _Sequence) -> None:
        """End a sequence: forget it, free its slot and give the slot to the backlog."""
        if sequence.timer is not None:
            sequence.timer.cancel()
            sequence.timer = None
        if self._live.get(sequence.corrid) is sequence:
            del self._live[sequence.corrid]
        sequence.state = None
        slot = sequence.slot
        if slot is None:
            return
        sequence.slot = None
        slot.sequence = None
        if self._backlog:
            self._assign(self._backlog.popleft(), slot)
            self._kick(slot.instance)
        else:
            heapq.heappush(self._free, (slot.index, slot.instance))

    def _maybe_idle(self, sequence: _Sequence) -> None:
        """Start the idle clock of a sequence that has nothing waiting or running."""
        if sequence.queue or sequence.running or sequence.slot is None:
            return
        if self._stopping:
            self._release(sequence)  # nothing more can arrive: free the slot for the backlog
        elif sequence.timer is None:
            sequence.timer = self._loop.call_later(self._idle_s, self._expire, sequence)

    def _expire(self, sequence: _Sequence) -> None:
        sequence.timer = None
        if sequence.queue or sequence.running or sequence.slot is None:
            return
        logger.info(
            "sequence %s of model '%s' was idle for more than %d us; its slot is released",
            sequence.corrid,
            self._model,
            int(self._idle_s * 1e6),
        )
        self._release(sequence)

    def _drop_cancelled(self, sequence: _Sequence) -> bool:
        """Drop requests whose callers went away; True when the sequence lost its slot."""
        queue = sequence.queue
        while queue and queue[0].future.done():
            entry = queue.popleft()
            self._pending -= 1
            if entry.request.flags & _END:
                self._release(sequence)
                return True
        if not queue:
            self._maybe_idle(sequence)
        return sequence.slot is None

    # -- forming batches -----------------------------------------------------------------------

    def _kick(self, instance: int) -> None:
        self._dispatch(self._instances[instance])

    def _on_timer(self, instance: _Instance) -> None:
        instance.timer = None
        self._dispatch(instance, deadline_passed=True)

    def _dispatch(self, instance: _Instance, deadline_passed: bool = False) -> None:
        if instance.busy or instance.forming:
            return
        instance.forming = True
        try:
            ready = self._ready_sequences(instance)
            if ready:
                self._form(instance, ready, deadline_passed)
        finally:
            instance.forming = False
        self._check_drained()

    def _ready_sequences(self, instance: _Instance) -> list[_Sequence]:
        """Sequences of the instance with a request waiting, in slot order."""
        ready = []
        for slot in instance.slots:
            while slot.sequence is not None and self._drop_cancelled(slot.sequence):
                pass  # the slot may have gone to the next sequence of the backlog: look again
            sequence = slot.sequence
            if sequence is not None and sequence.queue:
                ready.append(sequence)
        return ready

    def _compatible(self, ready: list[_Sequence]) -> list[_Sequence]:
        """The sequences whose next request can share a batch with the one that has waited
        longest, in ``ready``'s order. Seeding from the longest wait, not the first slot, keeps
        a request of another shape from waiting behind a stream of requests in lower slots."""
        if len(ready) == 1:
            return ready
        seed = min(ready, key=lambda sequence: sequence.queue[0].arrival)
        if not self._batching:
            return [seed]
        key = self._shape_key(seed)
        return [s for s in ready if s is seed or self._shape_key(s) == key]

    def _shape_key(self, sequence: _Sequence) -> tuple:
        # Requests batch together only when every non-batch dimension matches.
        entry = sequence.queue[0]
        key = [
            (name, tensor.data.shape[1:])
            for name, tensor in entry.request.inputs.items()
            if name not in self._ragged
        ]
        if self._states:
            fresh = sequence.state is None or entry.request.flags & _START
            states = self._initial if fresh else sequence.state
            key.extend((name, array.shape[1:]) for name, array in states.items())  # type: ignore[union-attr]
        return tuple(key)

    def _take(self, sequence: _Sequence) -> _Entry:
        """Pop a sequence's next request and add its control and state inputs."""
        entry = sequence.queue.popleft()
        self._pending -= 1
        sequence.running = True
        request = entry.request
        inputs = request.inputs
        flags = request.flags
        inputs.update(self._controls.by_flags[int(flags) & 3])
        if sequence.corrid_tensor is not None:
            inputs[sequence.corrid_tensor.name] = sequence.corrid_tensor
        if self._states:
            if sequence.state is None or flags & _START:
                sequence.state = dict(self._initial)
            for state in self._states:
                name = state.input_name
                inputs[name] = Tensor(name, state.datatype, sequence.state[name])
        return entry

    def _not_ready(self, like: InferenceRequest) -> InferenceRequest:
        """A filler request for an empty slot: READY false, zeros shaped like ``like``."""
        inputs = {
            name: Tensor(name, tensor.datatype, _zeros(tensor.data.shape, tensor.datatype))
            for name, tensor in like.inputs.items()
        }
        inputs.update(self._controls.not_ready)
        return InferenceRequest(
            like.model_name,
            inputs,
            model_version=like.model_version,
            outputs=like.outputs,
            batch_size=0,
            queued_ns=monotonic_ns(),
        )

    def _arm(self, instance: _Instance, when: float) -> None:
        if instance.timer is None:
            instance.timer = self._loop.call_at(when, self._on_timer, instance)

    def _submit(
        self,
        instance: _Instance,
        requests: list[InferenceRequest],
        entries: Sequence[_Entry | None],
        reason: str,
    ) -> None:
        if instance.timer is not None:
            instance.timer.cancel()
            instance.timer = None
        instance.busy = True
        create = self._loop.create_future
        futures: list[asyncio.Future[InferenceResponse]] = [create() for _ in requests[1:]]

        def done() -> None:
            if instance.submitting:
                self._loop.call_soon(self._batch_done, instance, entries, futures)
            else:
                self._batch_done(instance, entries, futures)

        futures.append(_BatchEnd(self._loop, done))
        self._statistics.record_dispatch(reason)
        instance.submitting = True
        try:
            self._pool.submit_to(instance.index, requests, futures)
        finally:
            instance.submitting = False

    # -- finished batches ----------------------------------------------------------------------

    def _batch_done(
        self,
        instance: _Instance,
        entries: Sequence[_Entry | None],
        futures: list[asyncio.Future[InferenceResponse]],
    ) -> None:
        for entry, future in zip(entries, futures, strict=True):
            error = future.exception()  # also marks a filler's error as retrieved
            if entry is None:
                continue
            sequence = entry.sequence
            sequence.running = False
            if error is None and entry.request.reschedule and self._run_again(entry):
                continue
            if error is None:
                response = future.result()
                if response is not None:  # None: a decoupled model answers on its own
                    error = self._keep_state(sequence, entry, response)
                if error is None and not entry.future.done():
                    entry.future.set_result(response)
            if error is not None and not entry.future.done():
                entry.future.set_exception(error)
            # an iterative sequence ends with its request, unless another one with its ID
            # came meanwhile: that one goes on in the slot, as Triton's does
            if entry.request.flags & _END or (self._iterative and not sequence.queue):
                self._release(sequence)
            else:
                self._maybe_idle(sequence)
        instance.busy = False
        self._dispatch(instance)

    def _run_again(self, entry: _Entry) -> bool:
        """Queue a rescheduled request again, in its sequence and slot (Triton's iterative
        sequence): neither START nor END now. False when its caller went away."""
        request = entry.request
        request.reschedule = False
        if entry.future.done():  # a decoupled request goes on: its model sees is_cancelled()
            return False
        request.flags = RequestFlag.NONE
        request.queued_ns = monotonic_ns()
        entry.sequence.queue.append(entry)
        self._pending += 1
        return True

    def _keep_state(
        self, sequence: _Sequence, entry: _Entry, response: InferenceResponse
    ) -> TritonError | None:
        """Store the state outputs for the sequence's next request; hide unrequested ones."""
        if not self._states:
            return None
        produced = {tensor.name: tensor for tensor in response.outputs}
        state = sequence.state
        for spec in self._states:
            tensor = produced.get(spec.output_name)
            if tensor is None:
                return internal(
                    f"model '{self._model}' did not return output '{spec.output_name}' of its "
                    f"implicit state '{spec.input_name}'; its backend must produce the state "
                    "outputs named in sequence_batching 'state'"
                )
            if state is not None:
                state[spec.input_name] = tensor.data
        if entry.strip:
            strip = entry.strip
            response.outputs = [t for t in response.outputs if t.name not in strip]
        return None

    # -- state and shutdown --------------------------------------------------------------------

    @property
    def pending_count(self) -> int:
        return self._pending

    def _check_drained(self) -> None:
        if self._drained is not None and self._idle():
            self._drained.set()

    def _idle(self) -> bool:
        return not self._pending and not any(instance.busy for instance in self._instances)

    async def stop(self) -> None:
        self._stopping = True
        # No request can arrive any more: idle sequences give their slots to the backlog.
        for instance in self._instances:
            for slot in instance.slots:
                sequence = slot.sequence
                if sequence is not None:
                    if sequence.timer is not None:
                        sequence.timer.cancel()
                        sequence.timer = None
                    self._maybe_idle(sequence)
        for instance in self._instances:
            self._dispatch(instance, deadline_passed=True)
        while not self._idle():
            self._drained = asyncio.Event()
            await self._drained.wait()
        for instance in self._instances:
            if instance.timer is not None:
                instance.timer.cancel()
                instance.timer = None
        await self._pool.drain()
        await asyncio.to_thread(self._pool.stop)


class DirectSequenceBatcher(SequenceBatcher):
    """``direct {}`` (the default): a sequence keeps one batch slot of its instance; a batch
    takes the next request of each ready slot, waiting up to ``max_queue_delay_microseconds``
    for ``minimum_slot_utilization``. Where the model has a READY control, empty slots are
    filled with not-ready requests so that slot positions stay put."""

    def __init__(self, context: SchedulerContext) -> None:
        direct = context.config.sequence_batching.direct
        super().__init__(
            context,
            max(1, context.config.max_batch_size),
            direct.max_queue_delay_microseconds / 1e6,
        )
        self._utilization = direct.minimum_slot_utilization
        # Filler requests keep slot positions only where the model can tell them apart.
        self._pad = self._batching and self._controls.has_ready

    def _form(self, instance: _Instance, ready: list[_Sequence], deadline_passed: bool) -> None:
        waits = self._delay > 0 and self._utilization > 0 and not deadline_passed
        utilized = len(ready) / self._max_batch >= self._utilization
        if waits and not utilized and not self._stopping:
            oldest = min(sequence.queue[0].arrival for sequence in ready)
            if self._loop.time() - oldest < self._delay:
                self._arm(instance, oldest + self._delay)
                return
        members = self._compatible(ready)
        if len(members) >= self._max_batch:
            reason = "max_batch_size"
        elif self._delay > 0 and self._utilization > 0:
            reason = "minimum_slot_utilization" if utilized else "max_queue_delay"
        else:
            reason = "instance_free"
        entries: list[_Entry | None] = []
        requests: list[InferenceRequest | None] = []
        if self._pad:
            by_position = {sequence.slot.index: sequence for sequence in members}  # type: ignore[union-attr]
            for position in range(max(by_position) + 1):
                sequence = by_position.get(position)
                entry = self._take(sequence) if sequence is not None else None
                entries.append(entry)
                requests.append(entry.request if entry is not None else None)
            like = next(request for request in requests if request is not None)
            requests = [r if r is not None else self._not_ready(like) for r in requests]
        else:
            for sequence in members:
                entry = self._take(sequence)
                entries.append(entry)
                requests.append(entry.request)
        self._submit(instance, requests, entries, reason)  # type: ignore[arg-type]


class OldestSequenceBatcher(SequenceBatcher):
    """``oldest {}``: an instance holds ``max_candidate_sequences`` sequences; batches are
    formed like the dynamic batcher's from their oldest waiting requests (preferred sizes,
    queue delay), answered in arrival order with ``preserve_ordering``."""

    def __init__(self, context: SchedulerContext) -> None:
        config = context.config
        oldest = config.sequence_batching.oldest
        max_batch = max(1, config.max_batch_size)
        super().__init__(
            context,
            oldest.max_candidate_sequences or max_batch,
            oldest.max_queue_delay_microseconds / 1e6,
        )
        self._preferred = sorted(set(oldest.preferred_batch_size)) or [max_batch]
        #: ``preserve_ordering``: (caller's, batcher's) futures in arrival order, until the
        #: caller's is answered; None: answers go out as they finish
        self._order: deque[tuple[asyncio.Future[InferenceResponse], asyncio.Future[Any]]] | None
        self._order = deque() if oldest.preserve_ordering else None

    def _form(self, instance: _Instance, ready: list[_Sequence], deadline_passed: bool) -> None:
        if len(ready) > 1:
            ready.sort(key=lambda sequence: sequence.queue[0].arrival)
        members = self._compatible(ready)[: self._max_batch]
        available = len(members)
        fitting = [size for size in self._preferred if size <= available]
        target = fitting[-1] if fitting else available
        head = members[0].queue[0]
        if (
            target < self._max_batch
            and target not in self._preferred
            and self._delay > 0
            and not deadline_passed
            and not self._stopping
            and self._loop.time() - head.arrival < self._delay
        ):
            self._arm(instance, head.arrival + self._delay)
            return
        if target >= self._max_batch:
            reason = "max_batch_size"
        elif target in self._preferred:
            reason = "preferred_batch_size"
        else:
            reason = "max_queue_delay" if self._delay > 0 else "instance_free"
        entries = [self._take(sequence) for sequence in members[:target]]
        self._submit(instance, [entry.request for entry in entries], entries, reason)

    def _answer(
        self, inner: asyncio.Future[InferenceResponse]
    ) -> asyncio.Future[InferenceResponse]:
        """With ``preserve_ordering``, the caller's future is answered once every request
        that arrived before is."""
        if self._order is None:
            return inner
        outer: asyncio.Future[InferenceResponse] = self._loop.create_future()
        self._order.append((outer, inner))
        inner.add_done_callback(self._release_in_order)
        # a caller that stops waiting cancels the request, as without ordering
        outer.add_done_callback(lambda done: inner.cancel() if done.cancelled() else None)
        return outer

    def _release_in_order(self, _finished: asyncio.Future[Any]) -> None:
        order = self._order
        assert order is not None
        while order:
            outer, inner = order[0]
            if not inner.done():
                return
            order.popleft()
            error = None if inner.cancelled() else inner.exception()  # retrieved either way
            if outer.done():
                continue  # the caller went away
            if inner.cancelled():
                outer.cancel()
            elif error is not None:
                outer.set_exception(error)
            else:
                outer.set_result(inner.result())


def create_sequence_batcher(context: SchedulerContext) -> SequenceBatcher:
    """The strategy the config names (``direct`` when it names none)."""
    if context.config.sequence_batching.HasField("oldest"):
        return OldestSequenceBatcher(context)
    return DirectSequenceBatcher(context)


@hookimpl
def triton_register_schedulers(registry: SchedulerRegistry) -> None:
    registry.add("sequence_batching", create_sequence_batcher)
