"""What one row of the flag table says: :class:`Flag`, where its value goes, and how it
fares against ``tritonserver`` (:class:`Triton`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

#: the statuses of docs/compatibility.md
WORKS: Final = "works"
PARTLY: Final = "partly"
NO_EFFECT: Final = "accepted, no effect"
NOT_SUPPORTED: Final = "not supported"
STATUSES: Final = (WORKS, PARTLY, NO_EFFECT, NOT_SUPPORTED)

#: "value": one value; "bool": Triton's ``--flag=true|false`` and a bare ``--flag``;
#: "repeat": given several times, a list
Form = Literal["value", "bool", "repeat"]
#: the objects a flag's value may go into (``"server.id"``, ``"frontends.http_port"``)
OWNERS: Final = ("server", "frontends", "log", "run")


@dataclass(frozen=True, slots=True)
class Triton:
    """A flag of ``tritonserver``: its row of docs/compatibility.md."""

    status: str = WORKS
    #: what differs from Triton, or why it has no effect (every status but works needs one)
    note: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status '{self.status}'")
        if self.status != WORKS and not self.note:
            raise ValueError(f"a flag that {self.status} must say why")


@dataclass(frozen=True, slots=True)
class Limit:
    """A flag that bounds what a client may make the server do: its row in a limit table of
    docs/security.md."""

    #: the table: "http", "grpc" or "shared-memory"
    table: str
    meaning: str
    #: the last column: what a client beyond the limit gets, or (gRPC) what grpcio does
    beyond: str
    #: the default as the table shows it; "": the flag's own
    default: str = ""


@dataclass(frozen=True, slots=True)
class FromEnv:
    """A default read from the environment when the parser is built; ``read`` raises
    ValueError for a value the variable may not have."""

    read: Callable[[Mapping[str, str]], Any]


@dataclass(frozen=True, slots=True)
class Converter:
    """Turns the values of the flags that name it into option fields.

    ``build(args)`` returns ``{"server.cache": ..., "frontends.metrics": ...}``; it raises
    ValueError naming the flag when the values cannot work together.
    """

    name: str
    build: Callable[[argparse.Namespace], Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class Elsewhere:
    """Where a value goes that no options object holds; ``why`` says it."""

    why: str


#: plugin folders: read before the command line is parsed, to find the plugins' flags
READ_EARLY: Final = Elsewhere("read before the command line, to find the plugins")
#: tritonserver's GPU memory flags: accepted, and when given one INFO line at start says
#: that they do nothing here (the backends manage GPU memory)
GPU_ONLY: Final = Elsewhere("no effect here: the backends manage GPU memory")

#: a field path, a converter, or a place outside the options
Into = str | Converter | Elsewhere


@dataclass(frozen=True, slots=True)
class Flag:
    """One flag of ``triton-core serve``: how it parses, where its value goes, how it fares
    against Triton's flag of the same name."""

    name: str
    #: ``"<owner>.<field>"`` (an owner of :data:`OWNERS`), a :class:`Converter`, or
    #: :data:`READ_EARLY` / :data:`GPU_ONLY`
    into: Into
    help: str | None = None
    #: the argparse type: parses the text, raises ArgumentTypeError with the reason
    type: Callable[[str], Any] | None = None
    #: for "repeat", a tuple (each parse gets a fresh list) or None
    default: Any = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    form: Form = "value"
    required: bool | FromEnv = False
    aliases: tuple[str, ...] = ()
    #: the ``tritonserver`` flag of this name; None: a flag of triton-core only
    triton: Triton | None = None
    #: its section of ``--help``
    group: str = ""
    #: a limit of docs/security.md
    limit: Limit | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    @property
    def dest(self) -> str:
        """Its attribute in the parsed namespace."""
        return self.name.lstrip("-").replace("-", "_")

    @property
    def field(self) -> tuple[str, str] | None:
        """(owner, field) when the value goes straight into an options field."""
        if not isinstance(self.into, str):
            return None
        owner, _, field = self.into.partition(".")
        return owner, field
