"""The ensemble scheduler (built-in plugin): runs an ensemble's plan, a DAG of other models.

The repository checks an ensemble and plans it (:mod:`triton_core.repository.ensembles`)
when it loads; this scheduler gets the plan in its :class:`SchedulerContext` and only runs
requests through it. Each step calls a composing model through the server, so that model
keeps its own scheduler and batching. A step fires as soon as every ensemble tensor it reads
exists, so independent steps run concurrently; tensors pass from step to step as the same
numpy arrays.

A decoupled step's responses each start a branch of the request (see the repository module);
an ensemble with a decoupled step streams: its client gets one response per branch that
produces the ensemble outputs, in the order the branches began, then the final flag once
every step is done.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncGenerator, Callable
from time import monotonic_ns
from typing import TYPE_CHECKING

from triton_core.backends.streaming import ResponsePool, StreamSender
from triton_core.errors import Status, TritonError, internal
from triton_core.observability.statistics import StepTimes
from triton_core.plugins.hookspecs import hookimpl
from triton_core.scheduling.base import Scheduler, SchedulerContext
from triton_core.server.model import ModelSignature
from triton_core.types import InferenceRequest, InferenceResponse, Tensor

if TYPE_CHECKING:
    from triton_core.backends.services import ModelServices
    from triton_core.plugins.registry import SchedulerRegistry
    from triton_core.repository.ensembles import EnsemblePlan, EnsembleStep


# -- running requests -------------------------------------------------------------------------


class EnsembleScheduler(Scheduler):
    """``ensemble_scheduling``: runs each request through the steps' models, as a DAG.

    Steps call :meth:`Server.infer` (a decoupled step :meth:`Server.infer_stream`), so each
    composing model's own scheduler (and batching) serves them. With
    ``max_inflight_requests`` > 0, each step has at most that many requests of this ensemble
    in flight; the others wait for a slot (``pending_count``).
    """

    def __init__(self, context: SchedulerContext) -> None:
        server = context.server
        if server is None:
            raise internal(f"ensemble '{context.model_name}' needs the server to call its steps")
        self._server: ModelServices = server
        self.loop = context.loop
        self.statistics = context.statistics
        self.name = context.model_name
        self._version = context.model_version
        self._signature = ModelSignature(context.config)
        plan = context.ensemble
        if plan is None:
            raise internal(f"ensemble '{self.name}' was loaded without its plan")
        self.plan: EnsemblePlan = plan
        #: what each step's requests name: the step's model, or its namespaced key
        self._step_models = tuple(step.model_key for step in plan.steps)
        limit = context.config.ensemble_scheduling.max_inflight_requests
        self._slots: tuple[asyncio.Semaphore | None, ...] = tuple(
            asyncio.Semaphore(limit) if limit else None for _ in self.plan.steps
        )
        self._waiting_for_slot = 0
        self._active = 0
        self._idle: asyncio.Event | None = None

    def enqueue(self, request: InferenceRequest) -> asyncio.Future[InferenceResponse]:
        future: asyncio.Future[InferenceResponse] = self.loop.create_future()
        self._active += 1
        future.add_done_callback(self._request_done)
        _EnsembleRun(self, request, future).start()
        return future

    def _request_done(self, _future: asyncio.Future[InferenceResponse]) -> None:
        self._active -= 1
        if self._idle is not None and not self._active:
            self._idle.set()

    async def call_step(
        self,
        step: EnsembleStep,
        values: dict[str, Tensor],
        request: InferenceRequest,
        deliver: Callable[[InferenceResponse], None] | None = None,
        steps: StepTimes | None = None,
    ) -> InferenceResponse | None:
        """Run one step for one request; errors name the ensemble and the step's model.

        A decoupled step hands each response with outputs to ``deliver`` as it comes and
        returns None once its model sent the final flag. The step's compute times are added
        to ``steps``.
        """
        step_request = self._step_request(step, values, request)
        step_request.ensemble_steps = steps
        server = self._server
        try:
            slot = self._slots[step.index]
            if slot is not None:
                self._waiting_for_slot += 1
                try:
                    await slot.acquire()
                finally:
                    self._waiting_for_slot -= 1
            try:
                if deliver is None:
                    return await server.infer(step_request, nested=True)
                await self._stream_step(step_request, deliver, _pool_of(request))
                return None
            finally:
                if slot is not None:
                    slot.release()
        except TritonError as error:
            reason = "CANCELED" if error.status is Status.CANCELLED else "OTHER"
            raise TritonError(
                error.status,
                f"in ensemble '{self.name}', step {step.index} (model '{step.model_name}') "
                f"failed: {error.message}",
                reason=reason,
            ) from None

    async def _stream_step(
        self,
        step_request: InferenceRequest,
        deliver: Callable[[InferenceResponse], None],
        pool: ResponsePool | None,
    ) -> None:
        """A decoupled step's responses to ``deliver``. With the ensemble's response
        ``pool``, the step's model is held back with a pool of its own: the next response
        is taken once the ensemble's unwritten ones fit theirs."""
        stream_pool = None if pool is None else ResponsePool(pool.limit)
        stream = self._server.infer_stream(step_request, nested=True, pool=stream_pool)
        assert isinstance(stream, AsyncGenerator)
        # closed at once when the ensemble stops, even while it waits for room: the step's
        # model is cancelled and no longer held
        async with contextlib.aclosing(stream) as responses:
            async for response in responses:
                if response.outputs:  # a flag-only final response carries nothing
                    deliver(response)
                if pool is not None and stream_pool is not None:
                    await pool.room()
                    stream_pool.release()

    def _step_request(
        self, step: EnsembleStep, values: dict[str, Tensor], request: InferenceRequest
    ) -> InferenceRequest:
        inputs = {}
        for input_name, tensor_name in step.inputs:
            tensor = values.get(tensor_name)
            if tensor is not None:  # an optional ensemble input the request left out
                # a new Tensor around the same array: the step's model may rename or reshape
                inputs[input_name] = Tensor(input_name, tensor.datatype, tensor.data)
        return InferenceRequest(
            self._step_models[step.index],
            inputs,
            step.model_version,
            id=request.id,
            outputs=list(step.requested),
            parameters=dict(request.parameters),
            priority=request.priority,
            timeout_us=request.timeout_us,
            correlation_id=request.correlation_id,
            flags=request.flags,
            trace=None if request.trace is None else request.trace.child(),
        )

    def outputs(self, values: dict[str, Tensor]) -> InferenceResponse:
        """The ensemble's outputs, before they are trimmed to what the request asked for."""
        outputs = []
        for name in self.plan.output_names:
            tensor = values.get(name)
            if tensor is None:
                raise internal(f"ensemble '{self.name}' did not produce output '{name}'")
            outputs.append(tensor)
        return InferenceResponse(outputs)

    def respond(self, request: InferenceRequest, values: dict[str, Tensor]) -> InferenceResponse:
        """The ensemble's response: its outputs (the requested ones), named and numbered."""
        result = self._signature.finish_one(request, self.outputs(values), self._version)
        if isinstance(result, TritonError):
            raise result
        return result

    @property
    def pending_count(self) -> int:
        return self._waiting_for_slot

    async def stop(self) -> None:
        """Let the requests already accepted finish (the server unloads models after that)."""
        while self._active:
            self._idle = asyncio.Event()
            await self._idle.wait()


class _Branch:
    """The tensors of one line of a request: the whole request, or what follows one response
    of a decoupled step (a copy of its parent's tensors plus that response's outputs)."""

    __slots__ = ("closed", "missing", "response", "tasks", "values", "waiting")

    def __init__(self, values: dict[str, Tensor], waiting: list[int], missing: int) -> None:
        #: ensemble tensor name -> tensor, as they become available
        self.values = values
        #: per step: how many of its tensors are still missing in this branch
        self.waiting = waiting
        #: steps of this branch running now
        self.tasks = 0
        #: ensemble outputs not produced yet in this branch (decoupled ensembles only)
        self.missing = missing
        #: the ensemble response this branch produced, until it is sent
        self.response: InferenceResponse | None = None
        #: the branch produces no more response of its own (sent in branch order)
        self.closed = False


class _EnsembleRun:
    """One request on its way through the steps; lives on the event loop only."""

    __slots__ = (
        "future",
        "order",
        "plan",
        "request",
        "root",
        "running",
        "scheduler",
        "sender",
        "started_ns",
        "steps",
    )

    def __init__(
        self,
        scheduler: EnsembleScheduler,
        request: InferenceRequest,
        future: asyncio.Future[InferenceResponse],
    ) -> None:
        self.scheduler = scheduler
        self.plan = scheduler.plan
        self.request = request
        self.future = future
        self.started_ns = monotonic_ns()
        #: the steps' compute times, summed (the ensemble's own, in Triton's statistics)
        self.steps = StepTimes()
        self.running: set[asyncio.Task[InferenceResponse | None]] = set()
        #: a decoupled ensemble answers through the request's sender, branch by branch
        self.sender = request.response_sender if self.plan.decoupled else None
        #: branches whose response is not sent yet, in the order they began
        self.order: deque[_Branch] = deque()
        # the ensemble's inputs are never its outputs: every output is still missing
        waiting = [step.needs for step in self.plan.steps]
        self.root = _Branch(dict(request.inputs), waiting, len(self.plan.output_names))
        future.add_done_callback(self._cancel_if_abandoned)
        if isinstance(self.sender, StreamSender):
            self.sender.on_cancel = self._client_gone

    def start(self) -> None:
        root = self.root
        if self.sender is not None:
            self.order.append(root)
        # An optional input left out counts as available: the steps that read it run without.
        for name in self.plan.input_names:
            self._available(root, name)
        self._maybe_closed(root)

    def _available(self, branch: _Branch, tensor: str) -> None:
        waiting = branch.waiting
        for index in self.plan.consumers.get(tensor, ()):
            waiting[index] -= 1
            if not waiting[index]:
                self._launch(branch, self.plan.steps[index])

    def _launch(self, branch: _Branch, step: EnsembleStep) -> None:
        deliver = None
        if step.decoupled:
            # what follows this step runs in the branches its responses start
            branch.closed = True

            def deliver(response: InferenceResponse) -> None:
                self._branch_out(branch, step, response)

        task = self.scheduler.loop.create_task(
            self.scheduler.call_step(step, branch.values, self.request, deliver, self.steps)
        )
        branch.tasks += 1
        self.running.add(task)
        task.add_done_callback(lambda done: self._step_done(branch, step, done))

    def _branch_out(self, parent: _Branch, step: EnsembleStep, response: InferenceResponse) -> None:
        """One response of a decoupled step: a new branch with its outputs."""
        if self.future.done():
            return
        values = dict(parent.values)
        missing = sum(1 for name in self.plan.output_names if name not in values)
        branch = _Branch(values, list(parent.waiting), missing)
        self.order.append(branch)
        self._take_outputs(branch, step, response)
        self._maybe_closed(branch)

    def _step_done(
        self, branch: _Branch, step: EnsembleStep, task: asyncio.Task[InferenceResponse | None]
    ) -> None:
        self.running.discard(task)
        if task.cancelled():
            return
        error = task.exception()  # retrieved even when no longer needed, so asyncio stays quiet
        if self.future.done():
            return
        if error is not None:
            self._fail(error)
            return
        response = task.result()
        if response is not None:
            self._take_outputs(branch, step, response)
        branch.tasks -= 1
        self._maybe_closed(branch)
        if not self.running and not self.future.done():
            self._finish()

    def _take_outputs(
        self, branch: _Branch, step: EnsembleStep, response: InferenceResponse
    ) -> None:
        outputs = self.plan.output_names if self.sender is not None else ()
        for output_name, tensor_name in step.outputs:
            try:
                produced = response.output(output_name)
            except KeyError:
                self._fail(
                    internal(
                        f"in ensemble '{self.scheduler.name}', step {step.index} (model "
                        f"'{step.model_name}') did not return output '{output_name}'"
                    )
                )
                return
            branch.values[tensor_name] = Tensor(tensor_name, produced.datatype, produced.data)
            if tensor_name in outputs:
                branch.missing -= 1
            self._available(branch, tensor_name)

    def _maybe_closed(self, branch: _Branch) -> None:
        """A decoupled ensemble's branch that has all outputs (or can get no more) is done:
        send what is ready, in the order the branches began."""
        if self.sender is None or self.future.done():
            return
        if not branch.closed and not branch.missing:
            branch.closed = True
            try:
                branch.response = self.scheduler.outputs(branch.values)
            except TritonError as error:
                self._fail(error)
                return
        elif not branch.tasks:
            branch.closed = True
        self._send_closed()

    def _send_closed(self) -> None:
        assert self.sender is not None
        order = self.order
        while order and order[0].closed:
            response = order.popleft().response
            if response is not None:
                self.sender.send(response)

    def _finish(self) -> None:
        if self.sender is None:
            try:
                self.future.set_result(self.scheduler.respond(self.request, self.root.values))
            except TritonError as failure:
                self._fail(failure)
                return
            self._record()
            return
        for branch in self.order:  # every step is done: no branch can wait any longer
            branch.closed = True
        self._send_closed()
        self.sender.send(None, final=True)
        self.future.set_result(None)  # type: ignore[arg-type]  # decoupled: answered above
        self._record()

    def _record(self) -> None:
        """The request succeeded: one execution of the ensemble, as long as its steps took
        together (and so for the ensemble this one is a step of)."""
        request, steps = self.request, self.steps
        queue_ns = max(0, self.started_ns - request.queued_ns) if request.queued_ns else 0
        self.scheduler.statistics.record_ensemble(request.batch_size, queue_ns, steps)
        outer = request.ensemble_steps
        if outer is not None:
            outer.add(steps.input_ns, steps.infer_ns, steps.output_ns)

    def _fail(self, error: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(error)
        self._cancel_running()

    def _client_gone(self) -> None:
        """The client of a decoupled ensemble stopped waiting: stop the steps still running."""
        if not self.future.done():
            self.future.cancel()

    def _cancel_if_abandoned(self, future: asyncio.Future[InferenceResponse]) -> None:
        if future.cancelled():  # the caller stopped waiting: stop the steps still running
            self._cancel_running()

    def _cancel_running(self) -> None:
        for task in list(self.running):
            task.cancel()


def _pool_of(request: InferenceRequest) -> ResponsePool | None:
    """The response pool of a decoupled ensemble's request (``--grpc-max-response-pool-size``)."""
    sender = request.response_sender
    return sender.pool if isinstance(sender, StreamSender) else None


@hookimpl
def triton_register_schedulers(registry: SchedulerRegistry) -> None:
    registry.add("ensemble_scheduling", EnsembleScheduler)
