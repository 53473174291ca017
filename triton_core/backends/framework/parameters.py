"""String settings read with checks: a model's config ``parameters`` or a backend's
``--backend-config`` options, parsed once per load with errors that name the key."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Final, overload

from triton_core.errors import Status, TritonError

if TYPE_CHECKING:
    from triton_core.backends.contract import Backend
    from triton_core.protos.model_config_pb2 import ModelConfig

_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off"})


class Parameters(Mapping[str, str]):
    """Settings by key, as strings, with typed readers that fail with INVALID_ARG.

    A read-only mapping; :meth:`boolean` and :meth:`integer` parse a value and name the
    owner, the key and the value when it is malformed::

        params = Parameters.of_model(config, "m")
        threads = params.integer("intra_op_thread_count", 0)  # 0 when unset
        arena = params.boolean("enable_mem_arena")  # None when unset
    """

    __slots__ = ("_owner", "_values")

    def __init__(self, values: Mapping[str, str], owner: str) -> None:
        """``owner`` starts each message: ``model 'm': parameter``, ``backend 'b': option``."""
        self._values = dict(values)
        self._owner = owner

    @classmethod
    def of_model(cls, config: ModelConfig, model: str, *, ignore: Iterable[str] = ()) -> Parameters:
        """The ``string_value`` of each config ``parameters`` entry, less the ``ignore`` keys."""
        ignored = frozenset(ignore)
        values = {
            key: value.string_value
            for key, value in config.parameters.items()
            if key not in ignored
        }
        return cls(values, f"model '{model}': parameter")

    @classmethod
    def of_backend(cls, backend: Backend) -> Parameters:
        """The ``--backend-config=<backend>,<key>=<value>`` options of a backend."""
        return cls(backend.options, f"backend '{backend.name}': option")

    def __getitem__(self, key: str) -> str:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def boolean(self, key: str) -> bool | None:
        """``1/true/yes/on`` or ``0/false/no/off`` (any case), or None when unset."""
        raw = self._values.get(key)
        if raw is None:
            return None
        lowered = raw.strip().lower()
        if lowered in _TRUE or lowered in _FALSE:
            return lowered in _TRUE
        raise TritonError(
            Status.INVALID_ARG,
            f"{self._owner} '{key}' is '{raw}', expected 1/0 or true/false",
        )

    @overload
    def integer(self, key: str, default: int, *, allowed: Iterable[int] | None = None) -> int: ...

    @overload
    def integer(
        self, key: str, default: None = None, *, allowed: Iterable[int] | None = None
    ) -> int | None: ...

    def integer(
        self, key: str, default: int | None = None, *, allowed: Iterable[int] | None = None
    ) -> int | None:
        """An integer >= 0 (one of ``allowed`` where given), or ``default`` when unset."""
        raw = self._values.get(key)
        if raw is None:
            return default
        try:
            value = int(raw.strip())
        except ValueError:
            value = -1
        choices = None if allowed is None else tuple(allowed)
        if value < 0 or (choices is not None and value not in choices):
            expected = " or ".join(map(str, choices)) if choices else "an integer >= 0"
            raise TritonError(
                Status.INVALID_ARG, f"{self._owner} '{key}' is '{raw}', expected {expected}"
            )
        return value
