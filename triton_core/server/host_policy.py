"""``--host-policy <name>,<setting>=<value>``: named CPU sets that model instances run on.

An ``instance_group`` with ``host_policy: "<name>"`` runs its instances' threads (and a Python
model's process) on that policy's CPUs: ``cpu-cores`` lists them (Triton's ranges, ``0-3,8-11``;
a single CPU ``5`` too), ``numa-node`` takes the CPUs of that node, so that the memory the
instance touches is allocated there (Linux allocates on first touch, near the CPU). Where both
are given, ``cpu-cores`` sets the CPUs. Checked at start: a bad value is refused naming the flag.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Final

#: Triton's settings of a host policy
SETTINGS: Final = ("numa-node", "cpu-cores")
#: where Linux lists the CPUs of NUMA node N
NODE_CPULIST: Final = "/sys/devices/system/node/node{}/cpulist"
#: the most CPUs one list may name: bounds the work a flag value can ask for
MAX_CPU_ID: Final = 1 << 16


def cpu_list(text: str, what: str) -> frozenset[int]:
    """CPUs of ``0-3,5`` (Linux's cpulist form); raises ValueError naming ``what``."""
    cpus: set[int] = set()
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        try:
            first = int(low)
            last = int(high) if dash else first
        except ValueError:
            raise ValueError(
                f"{what}: '{text}' is not a list of CPUs ('<lower_cpu_core_id>-"
                "<upper_cpu_core_id>', comma-separated)"
            ) from None
        if not 0 <= first <= last < MAX_CPU_ID:
            raise ValueError(f"{what}: '{part}' is not a range of CPU ids")
        cpus.update(range(first, last + 1))
    return frozenset(cpus)


def node_cpus(node: str, what: str) -> frozenset[int]:
    """The CPUs of NUMA node ``node``, as Linux lists them."""
    if not node.isdigit():
        raise ValueError(f"{what}: numa-node must be a node number, got '{node}'")
    path = Path(NODE_CPULIST.format(int(node)))
    try:
        text = path.read_text().strip()
    except OSError:
        raise ValueError(f"{what}: this machine has no NUMA node {node} ({path})") from None
    if not text:
        raise ValueError(f"{what}: NUMA node {node} has no CPUs")
    return cpu_list(text, what)


def resolve(entries: Iterable[tuple[str, str, str]]) -> dict[str, frozenset[int]]:
    """``--host-policy`` (name, setting, value) triples as each policy's CPUs; raises
    ValueError naming the flag and policy when one names no CPU this process may use."""
    settings: dict[str, dict[str, str]] = {}
    for name, key, value in entries:
        if key not in SETTINGS:  # Triton's words
            raise ValueError(
                f"Unsupported host policy setting '{key}' is specified, supported settings are "
                "'numa-node', 'cpu-cores'"
            )
        settings.setdefault(name, {})[key] = value
    allowed = frozenset(os.sched_getaffinity(0))
    policies = {}
    for name, given in settings.items():
        what = f"--host-policy '{name}'"
        if "cpu-cores" in given:
            cpus = cpu_list(given["cpu-cores"], f"{what} cpu-cores")
        else:
            cpus = node_cpus(given["numa-node"], what)
        if not cpus & allowed:
            raise ValueError(
                f"{what}: names no CPU this process may run on (it may use {format_cpus(allowed)})"
            )
        policies[name] = cpus
    return policies


def format_cpus(cpus: Iterable[int]) -> str:
    """``0-3,5``: the cpulist form of a set of CPUs."""
    ordered = sorted(cpus)
    ranges = []
    start = previous = ordered[0] if ordered else 0
    for cpu in ordered[1:]:
        if cpu != previous + 1:
            ranges.append((start, previous))
            start = cpu
        previous = cpu
    if ordered:
        ranges.append((start, previous))
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def run_this_thread_on(cpus: frozenset[int]) -> None:
    """Bind the calling thread (and the threads it starts after) to ``cpus``."""
    os.sched_setaffinity(0, cpus)
