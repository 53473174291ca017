"""docs/compatibility.md against the code: every Triton flag, pb_utils name and extension has a
row, and each row's status is what the code does."""

from __future__ import annotations

import importlib.util
import re
from functools import cache
from types import ModuleType

import pytest

from tests.support import ROOT
from triton_core.cli import build_parser
from triton_core.flags import docs
from triton_core.flags.build import serve_flags
from triton_core.flags.model import GPU_ONLY
from triton_core.server.core import EXTENSIONS

DATA = ROOT / "tests" / "data"
STATUSES = ("works", "partly", "accepted, no effect", "not supported")
ROW = re.compile(
    r"^\| (?P<kind>extension|feature|flag|pb_utils) \| `(?P<name>[^`]+)` \| "
    rf"(?P<status>{'|'.join(STATUSES)}) \| (?P<notes>.*) \|$"
)
#: a value of each kind of argument, as `tritonserver --help` names it
SAMPLE_BY_ARGUMENT = {
    "<integer>": "1",
    "<boolean>": "true",
    "<float>": "1.5",
    "<string>": "x",
    "<<string>=<string>>": "counter_latencies=true",
    "<<string>,<string>=<string>>": "local,size=1024",
    "<<integer>:<integer>>": "0:1024",
    "<<string>:<string>=<string>>": "health:key=value",
}
#: flags whose values must mean something to parse
SAMPLE_BY_FLAG = {
    "--log-format": "ISO8601",
    "--model-control-mode": "explicit",
    "--grpc-infer-response-compression-level": "high",
    "--host-policy": "policy,numa-node=0",
    "--model-load-gpu-limit": "0:0.5",
    "--sagemaker-safe-port-range": "8000-9000",
    "--rate-limit-resource": "R1:1:0",
    "--trace-config": "rate=10",
    "--trace-level": "TIMESTAMPS",
    "--rate-limit": "execution_count",
    "--model-config-name": "h100",
    "--http-header-forward-pattern": "^x-",
    "--grpc-header-forward-pattern": "^x-",
    "--grpc-infer-thread-count": "2",
}


@cache
def rows() -> dict[tuple[str, str], tuple[str, str]]:
    """(kind, name) -> (status, notes) of every row of the table."""
    found: dict[tuple[str, str], tuple[str, str]] = {}
    lines = (ROOT / "docs" / "compatibility.md").read_text().splitlines()
    table = [line for line in lines if line.startswith("| ")]
    assert table[:2] == list(docs.HEADER)
    for line in table[2:]:
        if line in docs.HEADER:  # the flags' table repeats the header
            continue
        match = ROW.match(line)
        assert match, f"a row not in the table's form (kind, `name`, status, notes): {line}"
        key = (match["kind"], match["name"])
        assert key not in found, f"two rows for {key}"
        found[key] = (match["status"], match["notes"].strip())
    return found


def of_kind(kind: str) -> dict[str, tuple[str, str]]:
    return {name: value for (row_kind, name), value in rows().items() if row_kind == kind}


def saved_lines(file_name: str) -> list[str]:
    text = (DATA / file_name).read_text()
    return [line for line in text.splitlines() if line.strip() and not line.startswith("#")]


def triton_flags_saved() -> dict[str, str]:
    """flag -> its argument as Triton's --help shows it ("none" for a bare flag)."""
    return dict(line.split("\t") for line in saved_lines("tritonserver_2.51_flags.txt"))


def test_the_saved_flag_list_is_tritons_whole_list() -> None:
    flags = triton_flags_saved()
    assert len(flags) == 87
    assert {"--log-file", "--model-namespacing", "--trace-config", "--host-policy"} <= set(flags)


def test_every_triton_flag_has_a_row() -> None:
    missing = set(triton_flags_saved()) - set(of_kind("flag"))
    assert not missing, f"docs/compatibility.md has no row for {sorted(missing)}"


def _parse(flag: str, argument: str) -> None:
    value = SAMPLE_BY_FLAG.get(flag, SAMPLE_BY_ARGUMENT.get(argument, "1"))
    argv = ["serve", "--model-repository", "/models", flag]
    if argument != "none":
        argv.append(value)
    build_parser().parse_args(argv)


@pytest.mark.parametrize("flag", sorted(of_kind("flag")))
def test_a_flag_parses_unless_its_row_says_not_supported(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _ = of_kind("flag")[flag]
    argument = triton_flags_saved().get(flag, "<integer>")
    if flag == "--help":
        with pytest.raises(SystemExit) as exit_:
            _parse(flag, argument)
        assert exit_.value.code == 0
        return
    if status == "not supported":
        with pytest.raises(SystemExit) as exit_:
            _parse(flag, argument)
        assert exit_.value.code == 2
        assert f"unrecognized arguments: {flag}" in capsys.readouterr().err
    else:
        _parse(flag, argument)


def test_flags_accepted_without_effect_say_so_at_start() -> None:
    no_effect = {
        flag for flag, (status, _) in of_kind("flag").items() if status == "accepted, no effect"
    }
    assert no_effect == {flag.name for flag in serve_flags() if flag.into is GPU_ONLY}


def test_the_flag_rows_are_those_the_flag_table_makes() -> None:
    written = docs.between_markers((ROOT / "docs" / "compatibility.md").read_text(), "flags")
    assert written == docs.compatibility_rows(), (
        "docs/compatibility.md differs from the flag table (triton_core/flags/table.py): "
        "run python -m triton_core.flags --update-docs"
    )


@cache
def our_pb_utils() -> ModuleType:
    path = ROOT / "plugins" / "python_model" / "triton_python_backend_utils.py"
    spec = importlib.util.spec_from_file_location("_pb_utils_checked_by_compatibility", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _resolves(dotted: str) -> bool:
    target: object = our_pb_utils()
    for part in dotted.split("."):
        if not hasattr(target, part):
            return False
        target = getattr(target, part)
    return True


def test_every_pb_utils_name_of_triton_has_a_row() -> None:
    names = saved_lines("triton_python_backend_utils_api.txt")
    assert len(names) > 90
    missing = set(names) - set(of_kind("pb_utils"))
    assert not missing, f"docs/compatibility.md has no row for {sorted(missing)}"
    extra = set(of_kind("pb_utils")) - set(names)
    assert not extra, f"rows for names Triton's pb_utils does not have: {sorted(extra)}"


@pytest.mark.parametrize(
    "name",
    sorted(name for name, (status, _) in of_kind("pb_utils").items() if status != "not supported"),
)
def test_a_pb_utils_name_marked_working_exists(name: str) -> None:
    assert _resolves(name), f"{name} is marked {of_kind('pb_utils')[name][0]} but does not exist"


def test_rows_that_are_not_works_say_why() -> None:
    silent = [key for key, (status, notes) in rows().items() if status != "works" and not notes]
    assert not silent, f"rows without a reason: {silent}"


def test_the_extensions_that_work_are_those_the_server_lists() -> None:
    working = {name for name, (status, _) in of_kind("extension").items() if status == "works"}
    assert working == set(EXTENSIONS)
