"""The rate limiter (``--rate-limit execution_count``), after Triton's ``rate_limiter.cc``.

An instance executes a batch only while it holds the resources its instance group lists in
``rate_limiter { resources [...] }``: per device unless ``global: true``. How many of each
resource exist is the largest count any loaded instance asks for, unless
``--rate-limit-resource <name>:<count>[:<device>]`` sets it; then a resource the flags do not
list has none, and a model needing more than there is fails to load with Triton's message.

Instances with work wait in one server-wide queue ordered by ``priority`` (0 counts as 1)
times the batches the instance has run, so that priority 2 gets half the turns of priority 1;
only the head of the queue may take resources, as in Triton. Staging and releasing run on
the event loop, registration on loader threads, under one lock; with rate limiting off no
pool has a limiter and nothing here runs.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from triton_core.errors import invalid_arg
from triton_core.protos.model_config_pb2 import ModelRateLimiter

#: device keys of the resource maps, as Triton's
GLOBAL = -2
PER_DEVICE = -1

OFF = "off"
EXECUTION_COUNT = "execution_count"
MODES = (OFF, EXECUTION_COUNT)

ResourceMap = dict[int, dict[str, int]]


def parse_resource(text: str) -> tuple[str, int, int]:
    """``<name>:<count>[:<device>]`` -> (name, count, device or PER_DEVICE)."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or not parts[0]:
        raise ValueError(f"--rate-limit-resource expects <name>:<count>[:<device>], got '{text}'")
    try:
        count = int(parts[1])
        device = int(parts[2]) if len(parts) == 3 else PER_DEVICE
    except ValueError:
        raise ValueError(
            f"--rate-limit-resource '{text}': count and device must be integers"
        ) from None
    if count < 0 or (len(parts) == 3 and device < 0):
        raise ValueError(f"--rate-limit-resource '{text}': count and device must be >= 0")
    return parts[0], count, device


@dataclass(eq=False, slots=True)
class InstanceSlot:
    """One instance as the limiter sees it: what it needs and how often it ran."""

    #: called on the event loop when the instance got its resources and may run a batch
    granted: Callable[[], None]
    needs: ResourceMap
    priority: int = 1
    executions: int = 0
    staged: bool = False
    holding: bool = False
    sequence: int = field(default=0)


def slot_needs(limits: ModelRateLimiter, device_id: int) -> ResourceMap:
    needs: ResourceMap = {}
    for resource in limits.resources:
        key = GLOBAL if getattr(resource, "global") else device_id
        needs.setdefault(key, {})[resource.name] = resource.count
    return needs


class RateLimiter:
    """Server-wide resources and the queue of instances waiting for them."""

    def __init__(self, explicit: Sequence[tuple[str, int, int]] = ()) -> None:
        self._explicit: ResourceMap = {}
        for name, count, device in explicit:
            self._explicit.setdefault(device, {})[name] = count
        # registration runs on loader threads and unregistration on stopping ones, while the
        # event loop stages and releases; grants call back into pools, which may release
        self._lock = threading.RLock()
        self._slots: list[InstanceSlot] = []
        self._available: ResourceMap = {}
        self._allocated: ResourceMap = {}
        self._staged: list[tuple[int, int, InstanceSlot]] = []
        self._order = itertools.count()

    # -- registration (any thread) ----------------------------------------------------------

    def register(self, slots: Sequence[InstanceSlot]) -> None:
        """Add a model version's instances; refuses needs the server cannot meet."""
        with self._lock:
            available = _largest([*(s.needs for s in self._slots), *(s.needs for s in slots)])
            _check_global_and_device(available)
            if self._explicit:
                available = self._apply_explicit(available)
            self._slots.extend(slots)
            self._available = available

    def unregister(self, slots: Sequence[InstanceSlot]) -> None:
        with self._lock:
            gone = {id(slot) for slot in slots}
            self._slots = [slot for slot in self._slots if id(slot) not in gone]
            self._staged = [entry for entry in self._staged if id(entry[2]) not in gone]
            heapq.heapify(self._staged)
            available = _largest([slot.needs for slot in self._slots])
            self._available = self._apply_explicit(available) if self._explicit else available

    def _apply_explicit(self, largest: ResourceMap) -> ResourceMap:
        """Counts from the flags; Triton's message when one is below what an instance needs."""
        result: ResourceMap = {}
        for device, needs in largest.items():
            for name, needed in needs.items():
                count = self._explicit_count(device, name)
                if count < needed:
                    raise invalid_arg(
                        f'Resource count for "{name}" is limited to {count} which will prevent '
                        "scheduling of one or more model instances, the minimum required count "
                        f"is {needed}"
                    )
                result.setdefault(device, {})[name] = count
        return result

    def _explicit_count(self, device: int, name: str) -> int:
        if device == GLOBAL:  # the device given with a flag does not matter
            return max((c.get(name, 0) for c in self._explicit.values()), default=0)
        return max(
            self._explicit.get(device, {}).get(name, 0),
            self._explicit.get(PER_DEVICE, {}).get(name, 0),
        )

    # -- scheduling (event loop) ------------------------------------------------------------

    def stage(self, slot: InstanceSlot) -> None:
        """``slot`` has work: queue it for resources, then grant what can be granted."""
        with self._lock:
            if not slot.staged and not slot.holding:
                slot.staged = True
                score = max(slot.priority, 1) * slot.executions
                heapq.heappush(self._staged, (score, next(self._order), slot))
            self._grant()

    def release(self, slot: InstanceSlot) -> None:
        """``slot`` finished its batch: its resources go back, waiting instances may run."""
        with self._lock:
            if slot.holding:
                slot.holding = False
                for device, needs in slot.needs.items():
                    allocated = self._allocated[device]
                    for name, count in needs.items():
                        allocated[name] -= count
            self._grant()

    def _grant(self) -> None:
        staged = self._staged
        while staged and self._allocate(staged[0][2]):
            slot = heapq.heappop(staged)[2]
            slot.staged = False
            slot.executions += 1
            slot.granted()

    def _allocate(self, slot: InstanceSlot) -> bool:
        for device, needs in slot.needs.items():
            allocated = self._allocated.get(device, {})
            available = self._available.get(device, {})
            for name, count in needs.items():
                if allocated.get(name, 0) + count > available.get(name, 0):
                    return False
        for device, needs in slot.needs.items():
            allocated = self._allocated.setdefault(device, {})
            for name, count in needs.items():
                allocated[name] = allocated.get(name, 0) + count
        slot.holding = True
        return True


def _largest(maps: Sequence[ResourceMap]) -> ResourceMap:
    """Per device and resource, the largest count any instance needs."""
    largest: ResourceMap = {}
    for needs in maps:
        for device, resources in needs.items():
            target = largest.setdefault(device, {})
            for name, count in resources.items():
                target[name] = max(target.get(name, 0), count)
    return largest


def _check_global_and_device(available: ResourceMap) -> None:
    for name in available.get(GLOBAL, {}):
        for device, resources in available.items():
            if device != GLOBAL and name in resources:
                raise invalid_arg(
                    f'Resource "{name}" is present as both global and device-specific resource '
                    "in the model configuration."
                )
