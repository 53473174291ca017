"""``--host-policy`` and ``instance_group { host_policy }`` on real servers: an instance's
thread (the numpy backend) and a Python model's process run on the policy's CPUs; bad
settings and unknown policy names are refused, naming the flag or the field."""

from __future__ import annotations

import os
from pathlib import Path
from textwrap import dedent

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.support import ServerProcess, refused_start_log, write_numpy_model

pytest.importorskip("triton_core_python")

NUMPY_PLUGIN = {"TRITON_CORE_PLUGINS": "tests.plugins.numpy_backend"}
#: answers with the CPUs its process may run on, read by the kernel for its executing thread
AFFINITY_MODEL = """
import os
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


def allowed_list():
    with open(f"/proc/self/task/{threading.get_native_id()}/status") as status:
        for line in status:
            if line.startswith("Cpus_allowed_list:"):
                return line.split(":", 1)[1].strip()
    return ""


class TritonPythonModel:
    def execute(self, requests):
        text = f"{sorted(os.sched_getaffinity(0))}|{allowed_list()}"
        out = pb_utils.Tensor("CPUS", np.array([text.encode()], dtype=np.object_))
        return [pb_utils.InferenceResponse([out]) for _ in requests]
"""


def _group(policy: str) -> str:
    return f'instance_group [ {{ kind: KIND_CPU count: 1 host_policy: "{policy}" }} ]'


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("host_policy")
    for name, policy in (("py_pinned", "pin"), ("py_free", "")):
        (root / name / "1").mkdir(parents=True)
        (root / name / "1" / "model.py").write_text(dedent(AFFINITY_MODEL))
        config = (
            'backend: "python"\n'
            'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
            'output [ { name: "CPUS" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
        )
        (root / name / "config.pbtxt").write_text(config + (_group(policy) if policy else ""))
    write_numpy_model(root, "np_pin", extra=_group("pin"))
    builders = pytest.importorskip("triton_core_onnx.model_builders")
    (root / "ox_pin" / "1").mkdir(parents=True)
    builders.mlp(root / "ox_pin" / "1" / "model.onnx")
    (root / "ox_pin" / "config.pbtxt").write_text(
        'platform: "onnxruntime_onnx"\nmax_batch_size: 8\n' + _group("pin")
    )
    return root


def _cpus(process: ServerProcess, model: str) -> str:
    client = httpclient.InferenceServerClient(process.http_url)
    try:
        tensor = httpclient.InferInput("IN", [1], "FP32")
        tensor.set_data_from_numpy(np.zeros(1, np.float32))
        return client.infer(model, [tensor]).as_numpy("CPUS")[0].decode()
    finally:
        client.close()


def _threads_on(process: ServerProcess, cpus: str) -> dict[str, str]:
    """System name by thread id, of the server's threads that may run on ``cpus`` only."""
    found = {}
    for task in Path(f"/proc/{process.process.pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
            name = (task / "comm").read_text().strip()
        except OSError:
            continue
        if f"Cpus_allowed_list:\t{cpus}\n" in status:
            found[task.name] = name
    return found


def _thread_cpus(process: ServerProcess, thread_name: str) -> str:
    """Cpus_allowed_list of the server's thread the system names ``thread_name``."""
    for task in Path(f"/proc/{process.process.pid}/task").iterdir():
        try:
            if (task / "comm").read_text().strip() != thread_name:
                continue
            for line in (task / "status").read_text().splitlines():
                if line.startswith("Cpus_allowed_list:"):
                    return line.split(":", 1)[1].strip()
        except OSError:
            continue
    raise AssertionError(f"no thread named {thread_name}")


def _usable() -> list[int]:
    cpus = sorted(os.sched_getaffinity(0))
    assert len(cpus) >= 2, "pinning is shown by moving an instance off one of two CPUs"
    return cpus


@pytest.mark.parametrize("which", [0, -1])
def test_instances_of_a_host_policy_run_on_its_cpu_cores(repository: Path, which: int) -> None:
    usable = _usable()
    cpu = usable[which]
    with ServerProcess(
        [repository], "--host-policy", f"pin,cpu-cores={cpu}-{cpu}", env=NUMPY_PLUGIN
    ) as process:
        process.wait_ready()
        assert _cpus(process, "py_pinned") == f"[{cpu}]|{cpu}"
        # a group without a policy keeps every CPU
        assert _cpus(process, "py_free").startswith(f"{usable}|")
        assert _thread_cpus(process, "np_pin_0_0") == str(cpu)
        assert _thread_cpus(process, "ox_pin_0_0") == str(cpu)
        # ONNX Runtime's own intra-op thread, started with the session, inherits the CPUs
        pinned = _threads_on(process, str(cpu))
        assert set(pinned.values()) - {"np_pin_0_0", "ox_pin_0_0"}, pinned


def test_numa_node_binds_to_the_cpus_of_that_node(repository: Path) -> None:
    cpulist = Path("/sys/devices/system/node/node0/cpulist").read_text().strip()
    with ServerProcess([repository], "--host-policy", "pin,numa-node=0", env=NUMPY_PLUGIN) as p:
        p.wait_ready()
        assert _cpus(p, "py_pinned").endswith(f"|{cpulist}")
        assert _thread_cpus(p, "np_pin_0_0") == cpulist


def test_a_group_naming_no_defined_policy_fails_its_load(repository: Path) -> None:
    log = refused_start_log_code(repository, "--host-policy", "other,cpu-cores=0-0")
    assert (
        "model 'py_pinned' instance_group 'py_pinned_0': 'host_policy' names 'pin', which no "
        "--host-policy defines (defined: 'other')"
    ) in log


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "pin,foo=1",
            "Unsupported host policy setting 'foo' is specified, supported settings are "
            "'numa-node', 'cpu-cores'",
        ),
        ("pin,cpu-cores=abc", "--host-policy 'pin' cpu-cores: 'abc' is not a list of CPUs"),
        ("pin,numa-node=x", "--host-policy 'pin' numa-node: must be a node number, got 'x'"),
        ("nopolicy", "argument --host-policy: expects <policy_name>,<setting>=<value>"),
    ],
)
def test_malformed_host_policies_are_refused_naming_the_flag(
    repository: Path, value: str, message: str
) -> None:
    assert message in refused_start_log([repository], "--host-policy", value)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("pin,numa-node=4095", "--host-policy 'pin': this machine has no NUMA node 4095"),
        ("pin,cpu-cores=4000-4001", "--host-policy 'pin': names no CPU this process may run on"),
    ],
)
def test_policies_this_machine_cannot_follow_stop_the_start(
    repository: Path, value: str, message: str
) -> None:
    assert message in refused_start_log_code(repository, "--host-policy", value)


def refused_start_log_code(repository: Path, *args: str) -> str:
    """The log of a server that fails at start (exit code 1: after parsing its flags)."""
    process = ServerProcess([repository], *args, env=NUMPY_PLUGIN)
    code = process.process.wait(timeout=120)
    process.stop()
    assert code == 1, process.log()[-4000:]
    return process.log()
