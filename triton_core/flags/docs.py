"""The flag rows of docs/compatibility.md, made from the table: the doc holds them between
:data:`BEGIN` and :data:`END`, and a test fails when they differ from what this prints."""

from __future__ import annotations

from pathlib import Path
from typing import Final

from triton_core.flags.table import FLAGS

BEGIN: Final = "<!-- flags: python -m triton_core.flags --update-docs -->"
END: Final = "<!-- /flags -->"
HEADER: Final = ("| kind | name | status | why / notes |", "| --- | --- | --- | --- |")
#: argparse's own flag, with no row in the table
_HELP_ROW: Final = "| flag | `--help` | works | `-h` too |"
COMPATIBILITY: Final = Path(__file__).resolve().parents[2] / "docs" / "compatibility.md"


def compatibility_rows() -> list[str]:
    """The table of Triton's flags: a row per name of every flag of ``tritonserver``."""
    rows = [*HEADER, _HELP_ROW]
    for flag in FLAGS:
        if flag.triton is not None:
            for name in flag.names:
                rows.append(f"| flag | `{name}` | {flag.triton.status} | {flag.triton.note} |")
    return rows


def between_markers(text: str) -> list[str]:
    """The lines of ``text`` between :data:`BEGIN` and :data:`END`."""
    lines = text.splitlines()
    return lines[lines.index(BEGIN) + 1 : lines.index(END)]


def with_rows(text: str) -> str:
    """``text`` with the rows between the markers made anew."""
    lines = text.splitlines(keepends=True)
    begin, end = lines.index(BEGIN + "\n"), lines.index(END + "\n")
    rows = [row + "\n" for row in compatibility_rows()]
    return "".join([*lines[: begin + 1], *rows, *lines[end:]])
