"""What this server does with each ``ModelConfig`` field: none is silently ignored.

Every field path of ``model_config.proto`` has an entry in :data:`FIELDS` (a unit test walks
the protobuf descriptor, and docs/model_config.md is generated from this table). At load,
:func:`audit` walks the fields a config sets and:

* ``honoured`` - the core (or every backend, through the core) acts on it;
* ``backend`` - a backend-specific field: honoured by backends that list it in
  ``Backend.config_fields``; for any other backend it falls back to ``fallback``;
* ``no effect`` - accepted as Triton's CPU build accepts it, with one warning at load naming
  the field and why it changes nothing here (GPU-only settings on a CPU server);
* ``refused`` - the load fails with a message naming the field.

Paths join field names with dots; repeated fields and map values add no index
(``instance_group.rate_limiter.resources.count``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from triton_core.errors import invalid_arg
from triton_core.protos.model_config_pb2 import ModelConfig

logger = logging.getLogger(__name__)

HONOURED: Final = "honoured"
BACKEND: Final = "backend"
NO_EFFECT: Final = "no effect"
REFUSED: Final = "refused"


@dataclass(frozen=True, slots=True)
class FieldPolicy:
    status: str
    #: what the field does here, or why it has no effect or is refused
    note: str
    #: for ``backend`` fields: what happens with a backend that does not list the field
    fallback: str = REFUSED


def _h(note: str) -> FieldPolicy:
    return FieldPolicy(HONOURED, note)


def _n(note: str) -> FieldPolicy:
    return FieldPolicy(NO_EFFECT, note)


def _r(note: str) -> FieldPolicy:
    return FieldPolicy(REFUSED, note)


def _b(note: str, fallback: str = REFUSED) -> FieldPolicy:
    return FieldPolicy(BACKEND, note, fallback)


_NO_GPU = "a GPU setting this server's backends do not use (Triton's CPU build ignores it too)"
_TENSORRT = "TensorRT-only; no backend here serves TensorRT engines"
_SHAPE_TENSORS = (
    "shape tensors are only supported for TensorRT platform, which no backend here serves"
)

FIELDS: Final[dict[str, FieldPolicy]] = {
    "name": _h("must match the model's folder"),
    "platform": _h("selects the backend plugin that provides the platform"),
    "backend": _h("selects the backend plugin by name"),
    "runtime": _b("the backend's runtime; backends here are Python plugins chosen by 'backend'"),
    "version_policy": _h("which version folders load"),
    "version_policy.latest": _h("the newest versions"),
    "version_policy.latest.num_versions": _h("how many of the newest versions"),
    "version_policy.all": _h("every version folder"),
    "version_policy.specific": _h("the listed versions"),
    "version_policy.specific.versions": _h("the listed versions"),
    "max_batch_size": _h("batch dimension and the batchers' limit"),
    "input": _h("request checks and what backends receive"),
    "input.name": _h("request checks"),
    "input.data_type": _h("request checks"),
    "input.format": _h(
        "reported in the config and metadata for clients; as in Triton, it "
        "does not change execution"
    ),
    "input.dims": _h("request checks"),
    "input.reshape": _h("requests are reshaped before the backend"),
    "input.reshape.shape": _h("requests are reshaped before the backend"),
    "input.is_shape_tensor": _r(_SHAPE_TENSORS),
    "input.allow_ragged_batch": _h(
        "the dynamic batcher batches requests of different shapes; framework backends join "
        "the input end to end into one 1-D tensor"
    ),
    "input.optional": _h("requests may leave the input out"),
    "input.is_non_linear_format_io": _r(_TENSORRT),
    "output": _h("response checks"),
    "output.name": _h("response checks"),
    "output.data_type": _h("response checks"),
    "output.dims": _h("response checks"),
    "output.reshape": _h("backends reshape outputs back"),
    "output.reshape.shape": _h("backends reshape outputs back"),
    "output.label_filename": _h("labels for the classification extension"),
    "output.is_shape_tensor": _r(_SHAPE_TENSORS),
    "output.is_non_linear_format_io": _r(_TENSORRT),
    "batch_input": _h(
        "filled by the server into every request of a formed batch; framework backends run "
        "the batch as one call, Python models see each request's share"
    ),
    "batch_input.kind": _h("every kind Triton has"),
    "batch_input.target_name": _h("the model input the server fills"),
    "batch_input.data_type": _h("TYPE_INT32 or TYPE_FP32, as Triton"),
    "batch_input.source_input": _h("the input whose shapes it describes"),
    "batch_output": _h(
        "framework backends cut the batch's output into pieces shaped like each request's "
        "source input"
    ),
    "batch_output.target_name": _h("the output that is scattered"),
    "batch_output.kind": _h("BATCH_SCATTER_WITH_INPUT_SHAPE"),
    "batch_output.source_input": _h("the input whose shapes the pieces take"),
    "optimization": _h("the section itself; see its fields"),
    "optimization.graph": _b("graph optimization level", fallback=NO_EFFECT),
    "optimization.graph.level": _b("graph optimization level", fallback=NO_EFFECT),
    "optimization.priority": _n("sets CUDA stream priority in Triton; " + _NO_GPU),
    "optimization.cuda": _n(_NO_GPU),
    "optimization.cuda.graphs": _n(_NO_GPU),
    "optimization.cuda.busy_wait_events": _n(_NO_GPU),
    "optimization.cuda.graph_spec": _n(_NO_GPU),
    "optimization.cuda.graph_spec.batch_size": _n(_NO_GPU),
    "optimization.cuda.graph_spec.input": _n(_NO_GPU),
    "optimization.cuda.graph_spec.input.dim": _n(_NO_GPU),
    "optimization.cuda.graph_spec.graph_lower_bound": _n(_NO_GPU),
    "optimization.cuda.graph_spec.graph_lower_bound.batch_size": _n(_NO_GPU),
    "optimization.cuda.graph_spec.graph_lower_bound.input": _n(_NO_GPU),
    "optimization.cuda.graph_spec.graph_lower_bound.input.dim": _n(_NO_GPU),
    "optimization.cuda.output_copy_stream": _n(_NO_GPU),
    "optimization.execution_accelerators": _b("execution providers of the backend"),
    "optimization.execution_accelerators.gpu_execution_accelerator": _b(
        "GPU execution providers of the backend"
    ),
    "optimization.execution_accelerators.gpu_execution_accelerator.name": _b("accelerator"),
    "optimization.execution_accelerators.gpu_execution_accelerator.parameters": _b(
        "accelerator settings"
    ),
    "optimization.execution_accelerators.cpu_execution_accelerator": _b(
        "CPU execution providers of the backend"
    ),
    "optimization.execution_accelerators.cpu_execution_accelerator.name": _b("accelerator"),
    "optimization.execution_accelerators.cpu_execution_accelerator.parameters": _b(
        "accelerator settings"
    ),
    "optimization.input_pinned_memory": _n("pinned memory stages copies to a GPU; " + _NO_GPU),
    "optimization.input_pinned_memory.enable": _n("pinned memory stages GPU copies; " + _NO_GPU),
    "optimization.output_pinned_memory": _n("pinned memory stages copies from a GPU; " + _NO_GPU),
    "optimization.output_pinned_memory.enable": _n("pinned memory stages GPU copies; " + _NO_GPU),
    "optimization.gather_kernel_buffer_threshold": _n("a CUDA gather kernel; " + _NO_GPU),
    "optimization.eager_batching": _n(
        "only TensorRT acts on it in Triton; the dynamic batcher forms a batch when an "
        "instance is free"
    ),
    "dynamic_batching": _h("the dynamic batcher"),
    "dynamic_batching.preferred_batch_size": _h("the dynamic batcher"),
    "dynamic_batching.max_queue_delay_microseconds": _h("the dynamic batcher"),
    "dynamic_batching.preserve_ordering": _h("the dynamic batcher"),
    "dynamic_batching.priority_levels": _h("priority queues"),
    "dynamic_batching.default_priority_level": _h("priority queues"),
    "dynamic_batching.default_queue_policy": _h("queue policy"),
    "dynamic_batching.default_queue_policy.timeout_action": _h("queue policy"),
    "dynamic_batching.default_queue_policy.default_timeout_microseconds": _h("queue policy"),
    "dynamic_batching.default_queue_policy.allow_timeout_override": _h("queue policy"),
    "dynamic_batching.default_queue_policy.max_queue_size": _h("queue policy"),
    "dynamic_batching.priority_queue_policy": _h("queue policy per priority level"),
    "dynamic_batching.priority_queue_policy.timeout_action": _h("queue policy"),
    "dynamic_batching.priority_queue_policy.default_timeout_microseconds": _h("queue policy"),
    "dynamic_batching.priority_queue_policy.allow_timeout_override": _h("queue policy"),
    "dynamic_batching.priority_queue_policy.max_queue_size": _h("queue policy"),
    "sequence_batching": _h("the sequence batcher"),
    "sequence_batching.direct": _h("the direct strategy"),
    "sequence_batching.direct.max_queue_delay_microseconds": _h("the direct strategy"),
    "sequence_batching.direct.minimum_slot_utilization": _h("the direct strategy"),
    "sequence_batching.oldest": _h("the oldest strategy"),
    "sequence_batching.oldest.max_candidate_sequences": _h("the oldest strategy"),
    "sequence_batching.oldest.preferred_batch_size": _h("the oldest strategy"),
    "sequence_batching.oldest.max_queue_delay_microseconds": _h("the oldest strategy"),
    "sequence_batching.oldest.preserve_ordering": _h(
        "responses return in the order the requests arrived, across sequences and instances"
    ),
    "sequence_batching.max_sequence_idle_microseconds": _h("idle sequences are released"),
    "sequence_batching.control_input": _h("control tensors the server fills"),
    "sequence_batching.control_input.name": _h("control tensors"),
    "sequence_batching.control_input.control": _h("control tensors"),
    "sequence_batching.control_input.control.kind": _h("control tensors"),
    "sequence_batching.control_input.control.int32_false_true": _h("control tensors"),
    "sequence_batching.control_input.control.fp32_false_true": _h("control tensors"),
    "sequence_batching.control_input.control.bool_false_true": _h("control tensors"),
    "sequence_batching.control_input.control.data_type": _h("control tensors"),
    "sequence_batching.state": _h("implicit state"),
    "sequence_batching.state.input_name": _h("implicit state"),
    "sequence_batching.state.output_name": _h("implicit state"),
    "sequence_batching.state.data_type": _h("implicit state"),
    "sequence_batching.state.dims": _h("implicit state"),
    "sequence_batching.state.initial_state": _h("implicit state"),
    "sequence_batching.state.initial_state.data_type": _h("implicit state"),
    "sequence_batching.state.initial_state.dims": _h("implicit state"),
    "sequence_batching.state.initial_state.zero_data": _h("implicit state"),
    "sequence_batching.state.initial_state.data_file": _h("implicit state"),
    "sequence_batching.state.initial_state.name": _h("implicit state"),
    "sequence_batching.state.use_same_buffer_for_input_output": _n(
        "a buffer-sharing optimization; states are host arrays here, results do not change"
    ),
    "sequence_batching.state.use_growable_memory": _n("growable GPU state memory; " + _NO_GPU),
    "sequence_batching.iterative_sequence": _h(
        "the sequence batcher: a request released with RESCHEDULE runs again in its slot"
    ),
    "ensemble_scheduling": _h("the ensemble scheduler"),
    "ensemble_scheduling.step": _h("the ensemble scheduler"),
    "ensemble_scheduling.step.model_name": _h("the ensemble scheduler"),
    "ensemble_scheduling.step.model_version": _h("the ensemble scheduler"),
    "ensemble_scheduling.step.input_map": _h("the ensemble scheduler"),
    "ensemble_scheduling.step.output_map": _h("the ensemble scheduler"),
    "ensemble_scheduling.step.model_namespace": _r("model namespacing is not supported"),
    "ensemble_scheduling.max_inflight_requests": _h("bounds requests in flight per step"),
    "instance_group": _h("model instances"),
    "instance_group.name": _h("instance names"),
    "instance_group.kind": _h("KIND_GPU is refused without GPUs"),
    "instance_group.count": _h("instances per group"),
    "instance_group.rate_limiter": _h(
        "with --rate-limit execution_count; with it off (the default) a warning at load says "
        "it has no effect"
    ),
    "instance_group.rate_limiter.resources": _h("resources an instance holds while it runs"),
    "instance_group.rate_limiter.resources.name": _h("the rate limiter"),
    "instance_group.rate_limiter.resources.global": _h("one count for the server, not per device"),
    "instance_group.rate_limiter.resources.count": _h("the rate limiter"),
    "instance_group.rate_limiter.priority": _h("weights the turns of waiting instances"),
    "instance_group.gpus": _h("checked against the GPUs present"),
    "instance_group.secondary_devices": _r("NVDLA devices are not supported"),
    "instance_group.secondary_devices.kind": _r("NVDLA devices are not supported"),
    "instance_group.secondary_devices.device_id": _r("NVDLA devices are not supported"),
    "instance_group.profile": _r(_TENSORRT + " (optimization profiles)"),
    "instance_group.passive": _h(
        "the group's instances are loaded and finalized but get no requests; a model whose "
        "groups are all passive is refused"
    ),
    "instance_group.host_policy": _h(
        "the instances' threads (a Python model's process) run on the CPUs of that "
        "--host-policy; a name no --host-policy defines fails the load"
    ),
    "default_model_filename": _h("the file each version folder holds"),
    "cc_model_filenames": _n("files per GPU compute capability; " + _NO_GPU),
    "metric_tags": _h("each tag labels the model's metrics as '_<key>', as Triton"),
    "parameters": _h("passed to the backend and the model (Python models read them)"),
    "parameters.string_value": _h("passed to the backend and the model"),
    "model_warmup": _h("warm-up samples run on every instance before the model is ready"),
    "model_warmup.name": _h("warm-up"),
    "model_warmup.batch_size": _h("warm-up"),
    "model_warmup.inputs": _h("warm-up"),
    "model_warmup.inputs.data_type": _h("warm-up"),
    "model_warmup.inputs.dims": _h("warm-up"),
    "model_warmup.inputs.zero_data": _h("warm-up"),
    "model_warmup.inputs.random_data": _h("warm-up"),
    "model_warmup.inputs.input_data_file": _h("warm-up"),
    "model_warmup.count": _h("warm-up"),
    "model_operations": _b("custom operation libraries"),
    "model_operations.op_library_filename": _b("custom operation libraries"),
    "model_transaction_policy": _h("decoupled responses"),
    "model_transaction_policy.decoupled": _h("decoupled responses"),
    "model_repository_agents": _h("repository agents"),
    "model_repository_agents.agents": _h("repository agents"),
    "model_repository_agents.agents.name": _h("repository agents"),
    "model_repository_agents.agents.parameters": _h("repository agents"),
    "response_cache": _h("the response cache"),
    "response_cache.enable": _h(
        "the response cache; without --cache-config a warning at load says it has no effect"
    ),
    "model_metrics": _h(
        "per-model buckets of nv_inference_first_response_histogram_ms, as Triton (a "
        "warning says when latency histograms are off or the family is not customizable)"
    ),
    "model_metrics.metric_control": _h("per-model metric options"),
    "model_metrics.metric_control.metric_identifier": _h("the metric family"),
    "model_metrics.metric_control.metric_identifier.family": _h("the metric family"),
    "model_metrics.metric_control.histogram_options": _h("histogram buckets"),
    "model_metrics.metric_control.histogram_options.buckets": _h("histogram buckets"),
}


def field_paths(descriptor: Any = ModelConfig.DESCRIPTOR, prefix: str = "") -> Iterator[str]:
    """Every field path of a message type, parents before their fields."""
    for field in descriptor.fields:
        path = prefix + field.name
        yield path
        child = _child_type(field)
        if child is not None:
            yield from field_paths(child, path + ".")


def _child_type(field: FieldDescriptor) -> Any:
    """The message type whose fields sit under ``field`` (a map's value type), or None."""
    message = field.message_type
    if message is None:
        return None
    if message.GetOptions().map_entry:
        return message.fields_by_name["value"].message_type
    return message


def set_fields(message: Message, prefix: str = "") -> Iterator[str]:
    """The paths of the fields ``message`` sets (non-default), parents first."""
    for field, value in message.ListFields():
        path = prefix + field.name
        yield path
        child = _child_type(field)
        if child is None:
            continue
        if child is not field.message_type:  # a map: its values
            items = list(value.values())
        elif field.is_repeated:
            items = list(value)
        else:
            items = [value]
        seen: set[str] = set()
        for item in items:
            for sub in set_fields(item, path + "."):
                if sub not in seen:
                    seen.add(sub)
                    yield sub


def audit(
    config: ModelConfig, backend_fields: frozenset[str] = frozenset(), backend: str = ""
) -> None:
    """Refuse the fields this server does not honour; warn once for those with no effect.

    ``backend_fields`` are the backend-specific paths the model's backend honours.
    """
    model = config.name
    covered: list[str] = []  # warned-about sections: their fields need no warning of their own
    for path in set_fields(config):
        if any(path.startswith(parent + ".") for parent in covered):
            continue
        policy = FIELDS.get(path)
        status = policy.status if policy is not None else REFUSED
        note = policy.note if policy is not None else "this server does not know the field"
        if status == BACKEND:
            if _listed(path, backend_fields):
                continue
            assert policy is not None
            status = policy.fallback
            note = f"backend '{backend}' does not support it ({note})"
        if status == REFUSED:
            raise invalid_arg(f"model '{model}': config field '{path}' is not supported: {note}")
        if status == NO_EFFECT:
            logger.warning("model '%s': config field '%s' has no effect: %s", model, path, note)
            covered.append(path)


def _listed(path: str, fields: frozenset[str]) -> bool:
    return any(path == field or path.startswith(field + ".") for field in fields)


def markdown_table() -> str:
    """docs/model_config.md's table: every field path, its status and why."""
    rows = ["| field | status | what happens |", "| --- | --- | --- |"]
    for path in field_paths():
        policy = FIELDS[path]
        status = policy.status
        if status == BACKEND:
            status = f"backend (else {policy.fallback})"
        rows.append(f"| `{path}` | {status} | {policy.note} |")
    return "\n".join(rows) + "\n"


def _rewrite_docs(path: str) -> None:
    """Replace the generated table in docs/model_config.md (``python -m`` this module)."""
    with open(path, encoding="utf-8") as file:
        page = file.read()
    begin, end = "<!-- generated: begin -->\n", "<!-- generated: end -->"
    head, rest = page.split(begin, 1)
    tail = rest.split(end, 1)[1]
    with open(path, "w", encoding="utf-8") as file:
        file.write(head + begin + markdown_table() + end + tail)


if __name__ == "__main__":
    _rewrite_docs("docs/model_config.md")
