"""The agents that saw one version set's LOAD, and the actions that set still owes them.

Triton's order (``model_lifecycle.cc``, ``TritonRepoAgentModelList``): after LOAD each agent
gets LOAD_COMPLETE, or LOAD_FAIL once the versions that did load are released again. A set
that completed gets UNLOAD when it stops serving (an unload, or a reload that replaces it)
and UNLOAD_COMPLETE once its last version has unloaded, that is after its requests drained.
Nothing follows LOAD_FAIL or UNLOAD_COMPLETE. Each action goes out at most once per set.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from triton_core.repository.agents import AgentAction, AgentModel, RepositoryAgent

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: the action that may follow each last-sent action
_NEXT: dict[AgentAction, tuple[AgentAction, ...]] = {
    AgentAction.LOAD: (AgentAction.LOAD_COMPLETE, AgentAction.LOAD_FAIL),
    AgentAction.LOAD_COMPLETE: (AgentAction.UNLOAD,),
    AgentAction.UNLOAD: (AgentAction.UNLOAD_COMPLETE,),
}


class AgentSet:
    """One load's agents, each with the model as it saw it, in the config's order."""

    def __init__(self, agents: list[tuple[RepositoryAgent, AgentModel]] | None = None) -> None:
        self.agents = list(agents or ())
        self.last = AgentAction.LOAD

    def send(self, action: AgentAction) -> None:
        """Tell every agent ``action`` if it is the set's next step; else do nothing.

        Blocking (agents may do file I/O). UNLOAD goes in order, the others in reverse;
        an agent's error is logged and the others still hear of it.
        """
        if action not in _NEXT.get(self.last, ()):
            return
        self.last = action
        notify(self.agents, action)


def notify(agents: list[tuple[RepositoryAgent, AgentModel]], action: AgentAction) -> None:
    """``action`` to each agent: UNLOAD in order, the others in reverse; errors are logged."""
    ordered = agents if action is AgentAction.UNLOAD else list(reversed(agents))
    for agent, model in ordered:
        try:
            agent.act(action, model)
        except Exception:
            logger.exception("repository agent failed on %s of '%s'", action.value, model.name)


async def run_detached(
    function: Callable[[], T], name: str, late: Callable[[T], None] | None = None
) -> T:
    """Run a blocking call on a daemon thread of its own and await its result.

    For calls that a timeout or the stop deadline may have to walk away from: a thread of
    the default executor that never returns would hold the process at exit, this one does
    not. Cancelling the await abandons the call; it runs on to its end, and ``late`` (on
    the event loop) gets what it returned then, to release it.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if future.done():
            if late is not None and error is None:
                late(result)  # type: ignore[arg-type]
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    def work() -> None:
        try:
            result, error = function(), None
        except BaseException as exc:  # handed to the awaiting task
            result, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop closed while the call ran
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=work, name=name, daemon=True).start()
    return await future
