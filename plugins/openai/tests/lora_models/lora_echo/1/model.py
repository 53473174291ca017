"""Answers with the ``lora_name`` the frontend put in ``sampling_parameters``, as JSON:
``{"lora_name": "doll"}``, or ``{"lora_name": null}`` when none was passed."""

from __future__ import annotations

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            tensor = pb_utils.get_input_tensor_by_name(request, "sampling_parameters")
            sampling = {} if tensor is None else json.loads(tensor.as_numpy().reshape(-1)[0])
            text = json.dumps({"lora_name": sampling.get("lora_name")})
            output = pb_utils.Tensor("text_output", np.array([text.encode()], dtype=object))
            request.get_response_sender().send(
                pb_utils.InferenceResponse([output]),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )
        return None
