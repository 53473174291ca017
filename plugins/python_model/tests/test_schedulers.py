"""Python models under the other schedulers: sequence batching and ensembles."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from triton_core import InferenceRequest, RequestFlag, Tensor

pytestmark = pytest.mark.timeout(120)

#: a running sum per sequence, from the START/END/READY/CORRID control inputs
ACCUMULATE = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.totals = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            def first(name):
                return pb_utils.get_input_tensor_by_name(request, name).as_numpy().reshape(-1)[0]

            start, end, ready = int(first("START")), int(first("END")), int(first("READY"))
            corrid = int(first("CORRID"))
            total = 0
            if ready:
                if start:
                    self.totals[corrid] = 0
                self.totals[corrid] = total = self.totals[corrid] + int(first("INPUT"))
                if end:
                    del self.totals[corrid]
            outputs = [
                pb_utils.Tensor("OUTPUT", np.array([[total]], dtype=np.int32)),
                pb_utils.Tensor("CORRID_OUT", np.array([[corrid]], dtype=np.uint64)),
            ]
            responses.append(pb_utils.InferenceResponse(outputs))
        return responses
"""

ACCUMULATE_CONFIG = """
backend: "python"
max_batch_size: 4
sequence_batching {
  max_sequence_idle_microseconds: 10000000
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "CORRID_OUT" data_type: TYPE_UINT64 dims: [ 1 ] }
]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""


async def test_sequence_batching_gives_the_model_its_control_inputs(repo, write_model, make_server):
    write_model(repo, "accumulate", ACCUMULATE, ACCUMULATE_CONFIG)

    async def sequence(server, corrid: int, values: list[int]) -> list[tuple[int, int]]:
        results = []
        for index, value in enumerate(values):
            flags = RequestFlag.NONE
            if index == 0:
                flags |= RequestFlag.SEQUENCE_START
            if index == len(values) - 1:
                flags |= RequestFlag.SEQUENCE_END
            request = InferenceRequest(
                "accumulate",
                {"INPUT": Tensor("INPUT", "INT32", np.array([[value]], dtype=np.int32))},
                correlation_id=corrid,
                flags=flags,
            )
            response = await server.infer(request)
            results.append(
                (
                    int(response.output("OUTPUT").data.reshape(-1)[0]),
                    int(response.output("CORRID_OUT").data.reshape(-1)[0]),
                )
            )
        return results

    async with make_server(repo) as server:
        first, second = await asyncio.gather(
            sequence(server, 1001, [1, 2, 3, 4]), sequence(server, 2002, [10, 20, 30])
        )
    assert first == [(1, 1001), (3, 1001), (6, 1001), (10, 1001)]
    assert second == [(10, 2002), (30, 2002), (60, 2002)]


ENSEMBLE_CONFIG = """
platform: "ensemble"
max_batch_size: 8
input [
  { name: "A" data_type: TYPE_INT32 dims: [ 4 ] },
  { name: "B" data_type: TYPE_INT32 dims: [ 4 ] }
]
output [
  { name: "TWICE_A" data_type: TYPE_INT32 dims: [ 4 ] },
  { name: "TWICE_B" data_type: TYPE_INT32 dims: [ 4 ] }
]
ensemble_scheduling {
  step [
    {
      model_name: "add_sub"
      model_version: -1
      input_map { key: "INPUT0" value: "A" }
      input_map { key: "INPUT1" value: "B" }
      output_map { key: "OUTPUT0" value: "sum" }
      output_map { key: "OUTPUT1" value: "difference" }
    },
    {
      model_name: "add_sub"
      model_version: -1
      input_map { key: "INPUT0" value: "sum" }
      input_map { key: "INPUT1" value: "difference" }
      output_map { key: "OUTPUT0" value: "TWICE_A" }
      output_map { key: "OUTPUT1" value: "TWICE_B" }
    }
  ]
}
"""


async def test_python_models_as_ensemble_steps(repo, write_model, models, make_server):
    write_model(
        repo, "add_sub", models.ADD_SUB,
        models.ADD_SUB_CONFIG.format(max_batch_size=8, dtype="TYPE_INT32", extra=""),
    )  # fmt: skip
    (repo / "pipeline" / "1").mkdir(parents=True)
    (repo / "pipeline" / "config.pbtxt").write_text(ENSEMBLE_CONFIG)
    a = np.array([[1, 2, 3, 4]], dtype=np.int32)
    b = np.array([[7, 7, 7, 7]], dtype=np.int32)
    async with make_server(repo) as server:
        responses = await asyncio.gather(
            *(
                server.infer(
                    InferenceRequest(
                        "pipeline",
                        {"A": Tensor("A", "INT32", a + i), "B": Tensor("B", "INT32", b)},
                    )
                )
                for i in range(5)
            )
        )
        assert server.statistics("add_sub")[0].inference_count == 10
    for i, response in enumerate(responses):
        np.testing.assert_array_equal(response.output("TWICE_A").data, 2 * (a + i))
        np.testing.assert_array_equal(response.output("TWICE_B").data, 2 * b)
