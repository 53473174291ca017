"""The tables of the docs that the flag table makes: the flag rows of docs/compatibility.md
and the limit tables of docs/security.md. Each doc holds a table between two markers
(:func:`markers`); a test fails when it differs from what this module makes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Final

from triton_core.flags.table import FLAGS

DOCS: Final = Path(__file__).resolve().parents[2] / "docs"
HEADER: Final = ("| kind | name | status | why / notes |", "| --- | --- | --- | --- |")
#: argparse's own flag, with no row in the table
_HELP_ROW: Final = "| flag | `--help` | works | `-h` too |"
#: each limit table's last column
_LIMIT_COLUMN: Final = {"http": "beyond it", "grpc": "grpcio", "shared-memory": "beyond it"}


def compatibility_rows() -> list[str]:
    """The table of Triton's flags: a row per name of every flag of ``tritonserver``."""
    rows = [*HEADER, _HELP_ROW]
    for flag in FLAGS:
        if flag.triton is not None:
            for name in flag.names:
                rows.append(f"| flag | `{name}` | {flag.triton.status} | {flag.triton.note} |")
    return rows


def limit_rows(table: str) -> list[str]:
    """A limit table of docs/security.md: "http", "grpc" or "shared-memory"."""
    rows = [f"| flag | default | meaning | {_LIMIT_COLUMN[table]} |", "| --- | --- | --- | --- |"]
    for flag in FLAGS:
        if flag.limit is not None and flag.limit.table == table:
            default = flag.limit.default or _shown(flag.default)
            limit = flag.limit
            rows.append(f"| `{flag.name}` | {default} | {limit.meaning} | {limit.beyond} |")
    return rows


def _shown(default: object) -> str:
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    if isinstance(default, float) and default.is_integer():
        return str(int(default))
    return str(default)


#: (doc, marker name, what makes its table)
GENERATED: Final[tuple[tuple[Path, str, Callable[[], list[str]]], ...]] = (
    (DOCS / "compatibility.md", "flags", compatibility_rows),
    (DOCS / "security.md", "limits-http", lambda: limit_rows("http")),
    (DOCS / "security.md", "limits-grpc", lambda: limit_rows("grpc")),
    (DOCS / "security.md", "limits-shared-memory", lambda: limit_rows("shared-memory")),
)


def markers(name: str) -> tuple[str, str]:
    """The lines around a generated table."""
    return f"<!-- {name}: python -m triton_core.flags --update-docs -->", f"<!-- /{name} -->"


def between_markers(text: str, name: str) -> list[str]:
    """The lines of ``text`` between the markers of ``name``."""
    begin, end = markers(name)
    lines = text.splitlines()
    return lines[lines.index(begin) + 1 : lines.index(end)]


def with_rows(text: str, name: str, rows: list[str]) -> str:
    """``text`` with ``rows`` between the markers of ``name``."""
    begin, end = markers(name)
    lines = text.splitlines(keepends=True)
    first, last = lines.index(begin + "\n"), lines.index(end + "\n")
    return "".join([*lines[: first + 1], *(row + "\n" for row in rows), *lines[last:]])


def update_docs() -> list[Path]:
    """Write every generated table into its doc; the docs that changed."""
    changed = []
    for doc, name, make in GENERATED:
        text = doc.read_text()
        updated = with_rows(text, name, make())
        if updated != text:
            doc.write_text(updated)
            changed.append(doc)
    return list(dict.fromkeys(changed))
