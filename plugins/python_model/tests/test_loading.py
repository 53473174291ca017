"""How ``model.py`` is imported and its config completed, as Triton's stub does."""

from __future__ import annotations

import json
import threading
from textwrap import dedent

import numpy as np
import pytest

from triton_core import InferenceRequest, Tensor

pytestmark = pytest.mark.timeout(120)

#: Triton's qa/python_models/multi_file, plus what a model pickles and dataclasses need
MULTI_FILE = """
import dataclasses
import json
import pickle

import file1
import numpy as np
import triton_python_backend_utils as pb_utils

from . import file2


@dataclasses.dataclass
class Point:
    x: int


class TritonPythonModel:
    def initialize(self, args):
        if file1.FILE_NAME != "FILE1" or file2.FILE_NAME != "FILE2":
            raise pb_utils.TritonModelException("Imports do not work")
        self.facts = {
            "name": __name__,
            "package": __package__,
            "point": pickle.loads(pickle.dumps(Point(3))).x,
            "fields": [field.name for field in dataclasses.fields(Point)],
        }

    def execute(self, requests):
        out = np.array([json.dumps(self.facts).encode()], dtype=np.object_)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("FACTS", out)]) for _ in requests]
"""

FACTS_CONFIG = """
backend: "python"
{extra}
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "FACTS" data_type: TYPE_STRING dims: [ 1 ] } ]
"""


def _facts_request(model: str) -> InferenceRequest:
    return InferenceRequest(model, {"X": Tensor("X", "INT32", np.array([1], np.int32))})


async def test_model_py_is_a_module_of_its_version_package(repo, write_model, make_server):
    model_dir = write_model(repo, "multi_file", MULTI_FILE, FACTS_CONFIG.replace("{extra}", ""))
    (model_dir / "1" / "file1.py").write_text('FILE_NAME = "FILE1"\n')
    (model_dir / "1" / "file2.py").write_text('FILE_NAME = "FILE2"\n')
    async with make_server(repo) as server:
        response = await server.infer(_facts_request("multi_file"))
    facts = json.loads(response.output("FACTS").data[0])
    assert facts == {"name": "1.model", "package": "1", "point": 3, "fields": ["x"]}


async def test_a_default_model_filename_names_the_module(repo, write_model, make_server):
    config = FACTS_CONFIG.replace("{extra}", 'default_model_filename: "mymodel.py"')
    model_dir = write_model(repo, "named", MULTI_FILE, config, version=7)
    (model_dir / "7" / "model.py").rename(model_dir / "7" / "mymodel.py")
    (model_dir / "7" / "file1.py").write_text('FILE_NAME = "FILE1"\n')
    (model_dir / "7" / "file2.py").write_text('FILE_NAME = "FILE2"\n')
    async with make_server(repo) as server:
        response = await server.infer(_facts_request("named"))
    facts = json.loads(response.output("FACTS").data[0])
    assert facts["name"] == "7.mymodel" and facts["package"] == "7"


def test_a_same_named_folder_in_the_working_directory_is_not_the_package(tmp_path, monkeypatch):
    """The version package is the model's own folder even when ``sys.path`` has another."""
    import sys

    from triton_core_python.model_module import load_model_module

    version_dir = tmp_path / "repo" / "m" / "9"
    version_dir.mkdir(parents=True)
    (version_dir / "model.py").write_text(
        dedent("""
        from . import helper
        VALUE = helper.VALUE
    """)
    )
    (version_dir / "helper.py").write_text("VALUE = 'mine'\n")
    decoy = tmp_path / "cwd" / "9"
    decoy.mkdir(parents=True)
    (decoy / "__init__.py").write_text("raise ImportError('the wrong folder')\n")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "cwd"), *sys.path])
    monkeypatch.setattr(sys, "modules", dict(sys.modules))
    assert load_model_module(str(version_dir / "model.py")).VALUE == "mine"


#: qa/L0_model_namespacing's python_addsub: a package the model imports its class from
ADD_SUB_PACKAGE = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        if config.as_dict()["input"]:
            return config
        for name in ("INPUT0", "INPUT1"):
            config.add_input({"name": name, "data_type": "TYPE_INT32", "dims": [4]})
        config.add_output({"name": "OUTPUT0", "data_type": "TYPE_INT32", "dims": [4]})
        return config

    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", a + b)]))
        return responses
"""

IMPORTED_CLASS = """
import os
import sys

sys.path.append(os.environ["ADD_SUB_PACKAGE_DIR"])
from python_addsub import *
"""


async def test_a_config_less_model_whose_class_is_imported_is_auto_completed(
    repo, tmp_path, make_server, monkeypatch
):
    package = tmp_path / "packages" / "python_addsub"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(ADD_SUB_PACKAGE)
    monkeypatch.setenv("ADD_SUB_PACKAGE_DIR", str(package.parent))
    (repo / "imported" / "1").mkdir(parents=True)
    (repo / "imported" / "1" / "model.py").write_text(IMPORTED_CLASS)
    async with make_server(repo) as server:
        config = server.model_config_json("imported")
        assert [tensor["name"] for tensor in config["input"]] == ["INPUT0", "INPUT1"]
        ones = np.ones(4, np.int32)
        inputs = {name: Tensor(name, "INT32", ones) for name in ("INPUT0", "INPUT1")}
        response = await server.infer(InferenceRequest("imported", inputs))
    assert response.output("OUTPUT0").data.tolist() == [2, 2, 2, 2]


@pytest.mark.parametrize(
    ("source", "may"),
    [
        ("class TritonPythonModel:\n    def execute(self, r):\n        pass\n", False),
        ("class TritonPythonModel(object):\n    pass\n", True),
        ("from base import Base\nclass TritonPythonModel(Base):\n    pass\n", True),
        ("from addsub import *\n", True),
        ("class TritonPythonModel:\n    pass\nfrom other import *\n", True),
        ("from other import TritonPythonModel\n", True),
        ("import other as TritonPythonModel\n", True),
        ("class TritonPythonModel:\n    pass\nTritonPythonModel = make()\n", True),
        ("@register\nclass TritonPythonModel:\n    pass\n", True),
        ("class TritonPythonModel(metaclass=Meta):\n    pass\n", True),
        ("class TritonPythonModel:\n    auto_complete_config = staticmethod(f)\n", True),
        ("def helper():\n    pass\n", True),  # no class: the import says so
        ("class TritonPythonModel:\n    def f(self\n", False),  # the load says so
    ],
)
def test_only_a_class_defined_in_model_py_alone_skips_the_import(source, may):
    from triton_core_python.backend import may_auto_complete

    assert may_auto_complete(source) is may


def test_models_loading_on_many_threads_decide_auto_complete_without_errors():
    """CPython 3.11 fails concurrent ``ast.parse`` calls now and then (python/cpython#106905).

    Objects with finalizers collected during the parse make threads switch inside it, as
    the model-loading threads do when other work allocates meanwhile.
    """
    from triton_core_python.backend import may_auto_complete

    source = "class TritonPythonModel:\n    pass\n" + "".join(
        f"def f{i}(x):\n    return [y for y in range(x) if (y * 2 + {i}) % 3]\n" for i in range(300)
    )

    class Finalized:
        def __del__(self):
            sum(range(100))

    failures: list[BaseException] = []

    def decide() -> None:
        for _ in range(30):
            garbage: list = [Finalized() for _ in range(50)]
            garbage.append(garbage)  # a cycle: only the collector frees it
            try:
                assert may_auto_complete(source) is False
            except BaseException as error:  # collected for the assert below
                failures.append(error)

    threads = [threading.Thread(target=decide) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
