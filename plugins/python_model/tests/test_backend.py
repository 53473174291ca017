"""The python backend in an in-process server: Triton-style model.py files, end to end."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import numpy as np
import pytest

from triton_core import InferenceRequest, Tensor
from triton_core.errors import Status, TritonError
from triton_core.types import RequestedOutput

pytestmark = pytest.mark.timeout(120)


def tensor(name: str, values, datatype: str = "INT32") -> Tensor:
    return Tensor(name, datatype, np.asarray(values))


def request(model: str, **inputs: Tensor) -> InferenceRequest:
    return InferenceRequest(model, dict(inputs))


async def test_add_sub_runs_unchanged(repo, write_model, models, make_server, no_leftovers):
    write_model(
        repo, "add_sub", models.ADD_SUB,
        models.ADD_SUB_CONFIG.format(max_batch_size=8, dtype="TYPE_INT32", extra=""),
    )  # fmt: skip
    async with make_server(repo) as server:
        a = np.arange(8, dtype=np.int32).reshape(2, 4)
        b = np.full((2, 4), 3, dtype=np.int32)
        response = await server.infer(
            request("add_sub", INPUT0=tensor("INPUT0", a), INPUT1=tensor("INPUT1", b))
        )
        assert response.model_name == "add_sub" and response.model_version == 1
        out0, out1 = response.output("OUTPUT0"), response.output("OUTPUT1")
        assert out0.datatype == "INT32" and out0.data.dtype == np.int32
        np.testing.assert_array_equal(out0.data, a + b)
        np.testing.assert_array_equal(out1.data, a - b)
        # only what was asked for
        only = InferenceRequest(
            "add_sub",
            {"INPUT0": tensor("INPUT0", a), "INPUT1": tensor("INPUT1", b)},
            outputs=[RequestedOutput("OUTPUT1")],
        )
        response = await server.infer(only)
        assert [t.name for t in response.outputs] == ["OUTPUT1"]


async def test_bytes_in_and_out_keep_embedded_nul_bytes(repo, write_model, models, make_server):
    write_model(repo, "strings", models.STRINGS, models.STRINGS_CONFIG)
    texts = [b"plain", b"with\x00nul\x00bytes", b"", b"\x00", "ünïcode".encode(), b"\xff\xfe"]
    data = np.array(texts, dtype=np.object_)
    async with make_server(repo) as server:
        response = await server.infer(request("strings", TEXT=tensor("TEXT", data, "BYTES")))
    wrapped = response.output("WRAPPED")
    assert wrapped.datatype == "BYTES"
    assert wrapped.data.tolist() == [b"<" + t + b">" for t in texts]
    assert response.output("LENGTH").data.tolist() == [len(t) for t in texts]


DATATYPES = ("BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
             "FP16", "FP32", "FP64", "BF16", "BYTES")  # fmt: skip


async def test_identity_round_trips_every_datatype(repo, write_model, models, make_server):
    inputs = "\n".join(
        f'{{ name: "INPUT{i}" data_type: TYPE_{"STRING" if d == "BYTES" else d} dims: [ -1 ] '
        "optional: true },"
        for i, d in enumerate(DATATYPES)
    )
    outputs = "\n".join(
        f'{{ name: "OUTPUT{i}" data_type: TYPE_{"STRING" if d == "BYTES" else d} dims: [ -1 ] }},'
        for i, d in enumerate(DATATYPES)
    )
    config = f'backend: "python"\nmax_batch_size: 0\ninput [ {inputs.rstrip(",")} ]\n'
    config += f"output [ {outputs.rstrip(',')} ]\n"
    # BF16 travels by DLPack: as_numpy() refuses it, as Triton does
    forward_any = models.IDENTITY.replace(
        "pb_utils.Tensor(output_name, tensor.as_numpy())",
        "pb_utils.Tensor.from_dlpack(output_name, tensor.to_dlpack()) "
        "if tensor.triton_dtype() == 14 else pb_utils.Tensor(output_name, tensor.as_numpy())",
    )
    assert forward_any != models.IDENTITY
    write_model(repo, "identity", forward_any, config)
    rng = np.random.default_rng(0)
    sent = {}
    for index, datatype in enumerate(DATATYPES):
        if datatype == "BYTES":
            values = np.array([b"a\x00", b"", b"xyz"], dtype=np.object_)
        elif datatype == "BOOL":
            values = np.array([True, False, True])
        elif datatype == "BF16":
            values = np.array([0x3F80, 0x4000, 0], dtype=np.uint16)
        else:
            from triton_core.tensors.dtypes import NUMPY_DTYPES

            values = (rng.random(3) * 100).astype(NUMPY_DTYPES[datatype])
        sent[f"INPUT{index}"] = Tensor(f"INPUT{index}", datatype, values)
    async with make_server(repo) as server:
        response = await server.infer(InferenceRequest("identity", dict(sent)))
    for index, datatype in enumerate(DATATYPES):
        out = response.output(f"OUTPUT{index}")
        assert out.datatype == datatype  # BF16 bits come back as uint16, labelled BF16
        assert out.data.tolist() == sent[f"INPUT{index}"].data.tolist(), datatype


async def test_as_numpy_of_a_bf16_input_fails_with_tritons_message(
    repo, write_model, models, make_server
):
    write_model(
        repo, "identity", models.IDENTITY,
        models.IDENTITY_CONFIG.format(max_batch_size=0, dtype="TYPE_BF16", extra=""),
    )  # fmt: skip
    bits = np.array([0x3F80, 0x4000], dtype=np.uint16)
    async with make_server(repo) as server:
        with pytest.raises(TritonError) as failed:
            await server.infer(request("identity", INPUT0=tensor("INPUT0", bits, "BF16")))
    assert (
        "TritonModelException: Tensor dtype is BF16 and cannot be converted to NumPy. Use "
        "to_dlpack() and from_dlpack() instead." in failed.value.message
    )


async def test_parameters_reach_the_model_and_come_back(repo, write_model, models, make_server):
    write_model(
        repo, "identity", models.IDENTITY,
        models.IDENTITY_CONFIG.format(max_batch_size=0, dtype="TYPE_INT32", extra=""),
    )  # fmt: skip
    async with make_server(repo) as server:
        sent = InferenceRequest(
            "identity",
            {"INPUT0": tensor("INPUT0", [1, 2])},
            parameters={"flag": True, "count": 3, "name": "x"},
        )
        response = await server.infer(sent)
    assert response.parameters == {"flag": True, "count": 3, "name": "x"}


BATCH_COUNTER = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        size = np.array([[len(requests)]], dtype=np.int32)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("SIZE", size)]) for _ in requests]
"""


async def test_dynamic_batching_hands_several_requests_to_one_execute(
    repo, write_model, make_server
):
    write_model(
        repo,
        "counter",
        BATCH_COUNTER,
        """
        backend: "python"
        max_batch_size: 8
        input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
        output [ { name: "SIZE" data_type: TYPE_INT32 dims: [ 1 ] } ]
        dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 2000000 }
        """,
    )
    async with make_server(repo) as server:
        responses = await asyncio.gather(
            *(server.infer(request("counter", X=tensor("X", [[i]]))) for i in range(4))
        )
    sizes = [int(r.output("SIZE").data[0, 0]) for r in responses]
    assert max(sizes) > 1, sizes


async def test_errors_become_error_responses(repo, write_model, models, make_server):
    write_model(repo, "failing", models.FAILING, models.FAILING_CONFIG)
    async with make_server(repo) as server:

        async def run(mode: int):
            return await server.infer(request("failing", MODE=tensor("MODE", [mode])))

        assert (await run(0)).output("OUT").data.tolist() == [0]
        with pytest.raises(TritonError) as info:
            await run(1)
        assert info.value.status is Status.INTERNAL
        message = info.value.message
        assert "ValueError: boom from the model" in message
        assert "model.py" in message and "execute" in message
        assert "failing" in message
        with pytest.raises(TritonError) as info:
            await run(2)
        assert info.value.status is Status.INVALID_ARG
        assert info.value.message == "bad MODE for this request"
        with pytest.raises(TritonError) as info:
            await run(3)
        assert info.value.status is Status.UNAVAILABLE and info.value.message == "try later"
        with pytest.raises(TritonError) as info:
            await run(4)
        assert "returned 0 responses for 1 requests" in info.value.message
        # the model keeps serving
        assert (await run(0)).output("OUT").data.tolist() == [0]
        stats = server.statistics("failing")[0]
        # as in Triton's Python backend, a response that carries an error (mode 2) is a
        # success; a raising execute, a raised TritonError and a missing response are not
        assert (stats.success.count, stats.fail.count) == (3, 3)


async def test_decoupled_model_streams_every_response(repo, write_model, models, make_server):
    write_model(repo, "repeat", models.REPEAT, models.REPEAT_CONFIG)
    async with make_server(repo) as server:
        sent = request("repeat", COUNT=tensor("COUNT", [3]))
        sent.id = "r1"
        responses = [r async for r in server.infer_stream(sent)]
        assert [r.final for r in responses] == [False, False, False, True]
        assert [r.output("OUT").data.tolist() for r in responses[:3]] == [[0], [1], [2]]
        assert responses[-1].outputs == [] and responses[-1].id == "r1"
        none = [r async for r in server.infer_stream(request("repeat", COUNT=tensor("COUNT", [0])))]
        assert len(none) == 1 and none[0].final
        # plain infer on a decoupled model is refused
        with pytest.raises(TritonError) as info:
            await server.infer(request("repeat", COUNT=tensor("COUNT", [1])))
        assert info.value.status is Status.UNSUPPORTED


async def test_cancelling_a_stream_reaches_is_cancelled(
    repo, write_model, models, make_server, caplog
):
    write_model(repo, "repeat", models.REPEAT, models.REPEAT_CONFIG)
    caplog.set_level(logging.WARNING, logger="triton_core_python")
    async with make_server(repo) as server:
        sent = request("repeat", COUNT=tensor("COUNT", [1000]), DELAY_MS=tensor("DELAY_MS", [20]))
        sent.id = "to-cancel"
        stream = server.infer_stream(sent)
        first = await stream.__anext__()
        assert first.output("OUT").data.tolist() == [0]
        await stream.aclose()
        for _ in range(400):
            if "request 'to-cancel' was cancelled" in caplog.text:
                break
            await asyncio.sleep(0.05)
        assert "request 'to-cancel' was cancelled" in caplog.text


async def test_model_sees_the_args_triton_passes(repo, write_model, make_server):
    source = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.args = args

    def execute(self, requests):
        out = np.array([json.dumps(self.args).encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("ARGS", out)]) for _ in requests]
"""
    model_dir = write_model(
        repo,
        "args",
        source,
        """
        backend: "python"
        input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
        output [ { name: "ARGS" data_type: TYPE_STRING dims: [ 1 ] } ]
        """,
        version=3,
    )
    async with make_server(repo) as server:
        response = await server.infer(request("args", X=tensor("X", [1])))
    args = json.loads(response.output("ARGS").data[0])
    assert set(args) == {
        "model_config", "model_instance_kind", "model_instance_name",
        "model_instance_device_id", "model_repository", "model_version", "model_name",
    }  # fmt: skip
    assert args["model_name"] == "args" and args["model_version"] == "3"
    assert args["model_repository"] == str(model_dir)
    assert args["model_instance_kind"] == "CPU" and args["model_instance_device_id"] == "0"
    assert args["model_instance_name"].startswith("args")
    config = json.loads(args["model_config"])
    assert config["name"] == "args" and config["backend"] == "python"
    assert config["input"][0]["data_type"] == "TYPE_INT32" and config["input"][0]["dims"] == [1]


AUTO_COMPLETE = """
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        config = auto_complete_model_config
        # Triton offers get_model_dir() here too: the model reads its own files
        with open(os.path.join(pb_utils.get_model_dir(), "width.txt")) as width_file:
            width = int(width_file.read())
        config.add_input({"name": "IN", "data_type": "TYPE_FP32", "dims": [width]})
        config.add_output({"name": "OUT", "data_type": "TYPE_FP32", "dims": [width]})
        config.set_max_batch_size(4)
        config.set_dynamic_batching()
        config.set_model_transaction_policy({"decoupled": False})
        return config

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() * 2)
            ])
            for r in requests
        ]
"""


async def test_auto_complete_config_fills_the_config(repo, write_model, make_server):
    model_dir = write_model(repo, "auto", AUTO_COMPLETE, 'backend: "python"\n')
    (model_dir / "1" / "width.txt").write_text("2")
    async with make_server(repo) as server:
        config = server.model_config_json("auto")
        assert config["max_batch_size"] == 4
        assert config["model_transaction_policy"] == {"decoupled": False}
        assert config["input"][0]["name"] == "IN" and config["input"][0]["dims"] == [2]
        assert config["output"][0]["data_type"] == "TYPE_FP32"
        assert "dynamic_batching" in config
        x = np.ones((1, 2), np.float32)
        response = await server.infer(request("auto", IN=Tensor("IN", "FP32", x)))
    np.testing.assert_array_equal(response.output("OUT").data, x * 2)


async def test_model_is_found_without_a_backend_in_its_config(
    repo, write_model, models, make_server
):
    write_model(
        repo, "found", models.FAILING, models.FAILING_CONFIG.replace('backend: "python"', "")
    )
    async with make_server(repo) as server:
        response = await server.infer(request("found", MODE=tensor("MODE", [0])))
        assert server.model_config_json("found")["backend"] == "python"
    assert response.output("OUT").data.tolist() == [0]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("raise RuntimeError('no weights here')\n", "RuntimeError: no weights here"),
        ("class Other:\n    pass\n", "defines no class 'TritonPythonModel'"),
        (
            "class TritonPythonModel:\n    def initialize(self, args):\n"
            "        raise ValueError('bad args')\n    def execute(self, requests):\n"
            "        return []\n",
            "ValueError: bad args",
        ),
    ],
)
async def test_a_model_that_fails_to_load_says_why(
    repo, write_model, make_server, source, expected, no_leftovers
):
    write_model(
        repo, "broken", source,
        'backend: "python"\ninput [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]\n',
    )  # fmt: skip
    with pytest.raises(TritonError) as info:
        async with make_server(repo):
            pass
    assert expected in info.value.message
    assert "broken" in info.value.message


async def test_large_tensors_grow_shared_memory(repo, write_model, models, make_server):
    write_model(
        repo, "identity", models.IDENTITY,
        models.IDENTITY_CONFIG.format(max_batch_size=0, dtype="TYPE_FP32", extra=""),
    )  # fmt: skip
    async with make_server(repo) as server:
        for size in (10, 24 << 20, 100, 3 << 20):  # floats: up to 96 MiB, well above 1 MiB
            data = np.arange(size, dtype=np.float32)
            response = await server.infer(
                request("identity", INPUT0=Tensor("INPUT0", "FP32", data))
            )
            out = response.output("OUTPUT0").data
            assert out.shape == (size,) and out[-1] == size - 1 and out[size // 2] == size // 2


async def test_missing_shm_directory_fails_the_load_with_a_clear_message(
    repo, write_model, models, make_server, no_leftovers
):
    write_model(repo, "failing", models.FAILING, models.FAILING_CONFIG)
    options = {"python": {"shm-directory": "/nonexistent/shm"}}
    with pytest.raises(TritonError) as info:
        async with make_server(repo, backend_options=options):
            pass
    message = info.value.message
    assert "'/nonexistent/shm' does not exist" in message
    assert "shm-directory" in message and "/dev/shm" in message


async def test_shm_directory_holds_no_names(
    repo, write_model, models, make_server, tmp_path, no_leftovers
):
    folder = tmp_path / "shm"
    folder.mkdir()
    write_model(repo, "failing", models.FAILING, models.FAILING_CONFIG)
    options = {"python": {"shm-directory": str(folder)}}
    async with make_server(repo, backend_options=options) as server:
        response = await server.infer(request("failing", MODE=tensor("MODE", [0])))
        assert response.output("OUT").data.tolist() == [0]
        assert list(folder.iterdir()) == []  # unlinked at creation: nothing to leak
    assert list(folder.iterdir()) == []


async def test_many_strings_travel_off_the_event_loop(repo, write_model, models, make_server):
    write_model(repo, "strings", models.STRINGS, models.STRINGS_CONFIG)
    texts = np.array([f"item-{i}\x00".encode() for i in range(50_000)], dtype=np.object_)
    async with make_server(repo) as server:
        response = await server.infer(request("strings", TEXT=tensor("TEXT", texts, "BYTES")))
    wrapped = response.output("WRAPPED").data
    assert len(wrapped) == 50_000 and wrapped[12345] == b"<item-12345\x00>"
    assert response.output("LENGTH").data[:3].tolist() == [7, 7, 7]


ENV_REPORT = """
import sys

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = np.array([sys.prefix.encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("PREFIX", out)]) for _ in requests]
"""


async def test_execution_env_path_runs_the_model_with_that_interpreter(
    repo, write_model, make_server, no_leftovers
):
    import site
    import subprocess
    import sys

    model_dir = write_model(
        repo,
        "in_env",
        ENV_REPORT,
        """
        backend: "python"
        input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
        output [ { name: "PREFIX" data_type: TYPE_STRING dims: [ 1 ] } ]
        parameters {
          key: "EXECUTION_ENV_PATH" value { string_value: "$$TRITON_MODEL_DIRECTORY/env" }
        }
        """,
    )
    env = model_dir / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    # the environment reaches numpy through a .pth file, as an environment with its own would
    (purelib,) = (env / "lib").glob("python*/site-packages")
    (purelib / "server_packages.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    async with make_server(repo) as server:
        response = await server.infer(request("in_env", X=tensor("X", [1])))
    assert response.output("PREFIX").data[0].decode() == str(env)


#: the packed environment's marker module: the model imports it from there
PACKED_REPORT = """
import numpy as np
import triton_python_backend_utils as pb_utils

import env_marker


class TritonPythonModel:
    def execute(self, requests):
        out = np.array([env_marker.__file__.encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("PREFIX", out)]) for _ in requests]
"""

PACKED_CONFIG = """
backend: "python"
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "PREFIX" data_type: TYPE_STRING dims: [ 1 ] } ]
parameters {
  key: "EXECUTION_ENV_PATH" value { string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" }
}
"""


def write_packed_env(archive, extra=()) -> None:
    """A conda-pack-like archive: ``bin/python3`` (this interpreter, with the environment's
    ``site-packages`` on its path, as an environment's own python has) and a marker module."""
    import io
    import sys
    import tarfile

    wrapper = (
        "#!/bin/sh\n"
        'prefix="$(cd "$(dirname "$0")/.." && pwd)"\n'
        'PYTHONPATH="$prefix/site-packages${PYTHONPATH:+:$PYTHONPATH}" '
        f'exec {sys.executable} "$@"\n'
    ).encode()
    files = [("bin/python3", wrapper, 0o755), ("site-packages/env_marker.py", b"MARK = 1\n", 0o644)]
    with tarfile.open(archive, "w:gz") as tar:
        for name, data, mode, *link in [*files, *extra]:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), mode
            if link:
                info.type, info.linkname = tarfile.SYMTYPE, link[0]
            tar.addfile(info, io.BytesIO(data))


async def test_a_packed_execution_env_is_unpacked_and_runs_the_stubs(
    repo, tmp_path, write_model, make_server, no_leftovers
):
    model_dir = write_model(repo, "packed", PACKED_REPORT, PACKED_CONFIG)
    write_packed_env(model_dir / "env.tar.gz")
    cache = tmp_path / "envs"
    options = {"python": {"execution-env-directory": str(cache)}}
    async with make_server(repo, backend_options=options) as server:
        response = await server.infer(request("packed", X=tensor("X", [1])))
    marker = Path(response.output("PREFIX").data[0].decode())
    (unpacked,) = cache.iterdir()
    assert marker == unpacked / "site-packages" / "env_marker.py"
    # a changed archive is unpacked again, replacing the old copy
    write_packed_env(model_dir / "env.tar.gz", [("site-packages/other.py", b"", 0o644)])
    async with make_server(repo, backend_options=options) as server:
        await server.infer(request("packed", X=tensor("X", [1])))
    (again,) = cache.iterdir()
    assert again != unpacked and (again / "site-packages" / "other.py").is_file()


@pytest.mark.parametrize(
    ("member", "expected"),
    [
        (("../escaped.py", b"x", 0o644), "refused to unpack"),
        (("lib/outside", b"", 0o777, "/etc/passwd"), "refused to unpack"),
        (("lib/up", b"", 0o777, "../../../../etc/passwd"), "refused to unpack"),
        (("big.bin", b"x" * 5000, 0o644), "unpacks to more than 4096 bytes"),
    ],
)
async def test_a_hostile_packed_env_is_refused(
    repo, tmp_path, write_model, make_server, member, expected
):
    model_dir = write_model(repo, "packed", PACKED_REPORT, PACKED_CONFIG)
    write_packed_env(model_dir / "env.tar.gz", [member])
    cache = tmp_path / "cache" / "envs"
    options = {"python": {"execution-env-directory": str(cache), "execution-env-max-bytes": "4096"}}
    with pytest.raises(TritonError) as info:
        async with make_server(repo, backend_options=options):
            pass
    assert expected in info.value.message and "EXECUTION_ENV_PATH" in info.value.message
    assert not (tmp_path / "cache" / "escaped.py").exists()
    assert list(cache.iterdir()) == []  # nothing half-unpacked is left


async def test_outputs_of_another_dtype_than_the_config_go_out_as_made_as_in_triton(
    repo, write_model, models, make_server
):
    source = models.ADD_SUB.replace("out_0.astype(self.output0_dtype)", "out_0.astype(np.float64)")
    config = models.ADD_SUB_CONFIG.format(max_batch_size=8, dtype="TYPE_FP32", extra="")
    write_model(repo, "doubles", source, config)
    write_model(repo, "fine", models.ADD_SUB, config)
    values = np.ones((1, 4), np.float32)
    inputs = {
        "INPUT0": tensor("INPUT0", values, "FP32"),
        "INPUT1": tensor("INPUT1", values, "FP32"),
    }
    async with make_server(repo) as server:
        # Triton's core holds an output to the config by its name only
        response = await server.infer(request("doubles", **inputs))
        output = response.output("OUTPUT0")
        assert (output.datatype, output.data.dtype) == ("FP64", np.float64)
        np.testing.assert_array_equal(output.data, values * 2)
        response = await server.infer(request("fine", **inputs))
        np.testing.assert_array_equal(response.output("OUTPUT0").data, values * 2)
