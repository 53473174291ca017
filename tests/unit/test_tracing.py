"""Trace settings: the command line as tritonserver reads it, settings updates as Triton's
TraceManager applies them, sampling, and the trace file and its indexed files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from triton_core.errors import Status, TritonError
from triton_core.observability.statistics import ExecutionTimes
from triton_core.observability.tracing import (
    SettingUpdate,
    TraceConfig,
    TraceFlags,
    TraceLevel,
    Tracer,
    parse_trace_flags,
    parse_update,
)
from triton_core.observability.tracing.settings import CLEAR
from triton_core.observability.tracing.trace import tensor_text
from triton_core.types import Tensor


def flags(*config: str, **deprecated: object) -> TraceConfig:
    return parse_trace_flags(TraceFlags(config=list(config), **deprecated), environ={})  # type: ignore[arg-type]


def test_defaults_are_tritons() -> None:
    config = flags()
    assert (config.level, config.rate, config.count, config.log_frequency) == (
        TraceLevel.OFF,
        1000,
        -1,
        0,
    )
    assert (config.file, config.mode, config.otel) == ("", "triton", ())


def test_trace_config_settings() -> None:
    config = flags(
        "triton,file=/tmp/t.json",
        "triton,log-frequency=50",
        "rate=100",
        "level=TIMESTAMPS",
        "level=TENSORS",
        "count=7",
    )
    assert config.file == "/tmp/t.json" and config.log_frequency == 50
    assert config.rate == 100 and config.count == 7
    assert config.level == TraceLevel.TIMESTAMPS | TraceLevel.TENSORS


def test_trace_config_wins_over_deprecated_flags_and_off_wins_over_levels() -> None:
    config = flags("rate=5", "triton,file=new", rate="9", file="old", level=["TIMESTAMPS"])
    assert (config.rate, config.file, config.level) == (5, "new", TraceLevel.TIMESTAMPS)
    assert flags("level=TIMESTAMPS", "level=OFF").level is TraceLevel.OFF
    assert flags(level=["max"]).level is TraceLevel.TIMESTAMPS


def test_opentelemetry_settings_get_bsp_defaults_from_the_environment() -> None:
    config = parse_trace_flags(
        TraceFlags(config=["mode=opentelemetry", "opentelemetry,url=http://c:4318/v1/traces"]),
        environ={"OTEL_BSP_SCHEDULE_DELAY": "10"},
    )
    assert config.otel == (
        ("url", "http://c:4318/v1/traces"),
        ("bsp_max_queue_size", "2048"),
        ("bsp_schedule_delay", "10"),
        ("bsp_max_export_batch_size", "512"),
    )
    resources = flags("mode=opentelemetry", "opentelemetry,resource=a=b=c").otel_resources()
    assert resources == {"service.name": "triton-inference-server", "a": "b=c"}


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("level=LOUD", "invalid value for trace level option: LOUD"),
        ("mode=zipkin", 'invalid value for trace mode option: zipkin. Available options are "'),
        (",rate=1", "No trace mode specified."),
        ("rate", "--trace-config option format is '<trace mode>,<setting>=<value>'. Got rate"),
        ("rate=", "--trace-config option format is"),
        ("rate=x", 'Bad option: "--trace-config rate".'),
        ("count=-2", 'Bad option: "--trace-config count".'),
        ("colour=red", 'Bad option: "--trace-config colour": unknown setting'),
        ("triton,colour=red", 'Bad option: "--trace-config triton,colour"'),
        ("opentelemetry,colour=red", 'Bad option: "--trace-config opentelemetry,colour"'),
        ("opentelemetry,bsp_max_queue_size=-1", "opentelemetry,bsp_max_queue_size"),
    ],
)
def test_bad_trace_config_is_refused_naming_it(config: str, message: str) -> None:
    with pytest.raises(ValueError) as refused:
        flags("mode=opentelemetry" if config.startswith("opentelemetry") else "rate=1", config)
    assert message in str(refused.value)


# -- updates, as Triton's TraceManager applies them -----------------------------------------


def tracer(tmp_path: Path, **config: object) -> Tracer:
    settings = {"level": TraceLevel.TIMESTAMPS, "rate": 1, "file": str(tmp_path / "t.json")}
    return Tracer(TraceConfig(**{**settings, **config}))  # type: ignore[arg-type]


def test_model_settings_follow_the_global_fields_they_do_not_set(tmp_path: Path) -> None:
    traces = tracer(tmp_path)
    traces.update("m", SettingUpdate(rate=12, log_frequency=34))
    traces.update("", SettingUpdate(rate=56, count=78, level=TraceLevel.OFF))
    model = traces.settings("m")
    assert (model.rate, model.log_frequency, model.count, model.level) == (
        12,
        34,
        78,
        TraceLevel.OFF,
    )
    traces.update("", SettingUpdate(rate=CLEAR, count=CLEAR))
    assert (traces.settings("").rate, traces.settings("").count) == (1, -1)
    assert traces.settings("m").count == -1  # followed the global count back
    traces.update("m", SettingUpdate(rate=CLEAR, log_frequency=CLEAR))
    assert traces.settings("m") == traces.settings("")  # nothing of its own: the global one


def test_enabled_follows_the_levels_in_force(tmp_path: Path) -> None:
    traces = tracer(tmp_path, level=TraceLevel.OFF)
    assert not traces.enabled
    traces.update("m", SettingUpdate(level=TraceLevel.TENSORS))
    assert traces.enabled
    assert traces.sample("other") is None
    assert traces.sample("m") is not None
    traces.update("m", SettingUpdate(level=CLEAR))
    assert not traces.enabled


def test_a_setting_that_would_trace_nothing_is_refused(tmp_path: Path) -> None:
    traces = Tracer(TraceConfig(rate=1))  # no file
    with pytest.raises(TritonError) as refused:
        traces.update("", SettingUpdate(level=TraceLevel.TIMESTAMPS))
    assert refused.value.status is Status.INVALID_ARG
    assert refused.value.message == (
        "Attempting to set invalid trace setting :trace file name is not given"
    )
    traces.update("", SettingUpdate(level=TraceLevel.OFF))  # turning it off is allowed


def test_rate_and_count_sample_as_triton(tmp_path: Path) -> None:
    traces = tracer(tmp_path, rate=3, count=2)
    sampled = [traces.sample("m") is not None for _ in range(12)]
    assert sampled == [False, False, True, False, False, True] + [False] * 6
    assert traces.settings("m").count == 0


@pytest.mark.parametrize(
    ("settings", "grpc", "status", "message"),
    [
        ({"trace_file": ["x"]}, False, Status.UNSUPPORTED, "trace file location can not be"),
        ({"trace_rate": ["1", "2"]}, True, Status.INVALID_ARG, "expect only 1 value for"),
        ({"trace_count": ["-5"]}, True, Status.INVALID_ARG, "Expecting value >= -1, got: -5"),
        ({"log_frequency": ["4294967296"]}, False, Status.INVALID_ARG, "[ 0, 4294967295 ]"),
        ({"trace_level": ["OFF", "TENSORS"]}, False, Status.INVALID_ARG, "only one trace level"),
    ],
)
def test_bad_updates_are_refused_with_tritons_words(
    settings: dict, grpc: bool, status: Status, message: str
) -> None:
    with pytest.raises(TritonError) as refused:
        parse_update(settings, grpc)
    assert refused.value.status is status
    assert message in refused.value.message


def test_null_and_empty_values_clear() -> None:
    update = parse_update({"trace_level": None, "trace_rate": []}, grpc=True)
    assert update.level is CLEAR and update.rate is CLEAR and update.count is None


# -- the file ------------------------------------------------------------------------------


def finished_trace(traces: Tracer, model: str = "m") -> None:
    trace = traces.sample(model)
    assert trace is not None
    trace.request_start(model, 1, "")
    trace.compute(ExecutionTimes(100, 1, 2, 3))
    trace.request_end()
    trace.end()


def test_the_main_file_is_one_json_array_written_at_close(tmp_path: Path) -> None:
    traces = tracer(tmp_path)
    for _ in range(3):
        finished_trace(traces)
    traces.close()
    records = json.loads((tmp_path / "t.json").read_text())
    assert [record["id"] for record in records if "model_name" in record] == [1, 2, 3]
    compute = [r["timestamps"][0] for r in records if r["id"] == 1 and "timestamps" in r][1:5]
    assert compute == [
        {"name": "COMPUTE_START", "ns": 100},
        {"name": "COMPUTE_INPUT_END", "ns": 101},
        {"name": "COMPUTE_OUTPUT_START", "ns": 103},
        {"name": "COMPUTE_END", "ns": 106},
    ]


def test_a_replaced_setting_writes_what_it_holds(tmp_path: Path) -> None:
    traces = tracer(tmp_path, log_frequency=5)
    finished_trace(traces)
    traces.update("", SettingUpdate(log_frequency=2))
    traces.file.flush()
    assert len(json.loads((tmp_path / "t.json.0").read_text())) > 0
    finished_trace(traces)
    finished_trace(traces)
    traces.file.flush()
    assert (tmp_path / "t.json.1").exists()
    traces.close()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["t.json.0", "t.json.1"]


def test_child_traces_are_written_with_their_parent(tmp_path: Path) -> None:
    traces = tracer(tmp_path, log_frequency=1)  # each finished request at once, indexed
    parent = traces.sample("ens")
    assert parent is not None
    parent.request_start("ens", 1, "r")
    child = parent.child()
    child.request_start("step", 1, "r")
    parent.request_end()
    parent.end()
    traces.file.flush()
    assert not (tmp_path / "t.json.0").exists()  # the child is still open
    child.request_end()
    traces.file.flush()
    headers = [r for r in json.loads((tmp_path / "t.json.0").read_text()) if "model_name" in r]
    assert headers == [
        {"id": 1, "model_name": "ens", "model_version": 1, "request_id": "r"},
        {"id": 2, "model_name": "step", "model_version": 1, "request_id": "r", "parent_id": 1},
    ]


@pytest.mark.parametrize(
    ("datatype", "values", "text"),
    [
        ("INT32", np.array([[1, -2], [3, 4]], np.int32), "1,-2,3,4"),
        ("FP32", np.array([0.1, 1e-7, 2.0], np.float32), "0.1,1e-07,2"),
        ("BOOL", np.array([True, False]), "1,0"),
        ("BYTES", np.array([b"a", "b"], object), '"a","b"'),
        ("FP16", np.array([1.0], np.float16), ""),
    ],
)
def test_tensor_values_as_triton_writes_them(datatype: str, values: np.ndarray, text: str) -> None:
    assert tensor_text(datatype, Tensor("x", datatype, values).data) == text


def test_opentelemetry_mode_refuses_the_tensors_level(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="level=TENSORS is not supported in opentelemetry"):
        flags("mode=opentelemetry", "level=TENSORS")
    traces = Tracer(TraceConfig(level=TraceLevel.TIMESTAMPS, rate=1, mode="opentelemetry"))
    with pytest.raises(TritonError, match="trace_level TENSORS is not supported"):
        traces.update("m", SettingUpdate(level=TraceLevel.TENSORS))


def test_settings_of_the_other_mode_are_named_in_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = flags("triton,file=t.json", "mode=opentelemetry")
    assert "'--trace-config triton,file' has no effect" in caplog.text
    assert config.mode == "opentelemetry"
    flags("opentelemetry,url=http://x", "rate=1")
    assert "'--trace-config opentelemetry,url' has no effect" in caplog.text
