"""Records: dataclasses whose methods are written once, here, instead of for each class.

`@dataclass` writes every class's `__init__`, `__repr__` and `__eq__` (and, frozen,
`__hash__`, `__setattr__` and `__delattr__`) as source text and compiles it as the module
is imported: 0.2-0.5 ms a class, over 20 ms of `hilo queue status` for the records it
loads. A subclass of `Record` (mutable) or `Frozen` is a dataclass all the same — its
annotations are its fields; `dataclasses.fields`, `replace`, `asdict` and field metadata
work — and behaves as `@dataclass` or `@dataclass(frozen=True)` would make it: built from
its fields (positionally or by name, defaults and default factories, then
`__post_init__`), compared and shown by them, frozen and hashable or mutable and not.

The records that every `hilo` command loads (the configuration, the data directory, the
queue's) are these; elsewhere `@dataclass` reads the same and costs nothing that matters.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, dataclass_transform


@dataclass_transform(field_specifiers=(field,))
class Record:
    """A mutable record, as `@dataclass` makes one (see the module docstring)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__module__ == __name__:  # Frozen, below, is a kind of record, not a record
            return
        dataclass(init=False, repr=False, eq=False)(cls)
        if any(f.kw_only for f in dataclasses.fields(cls)):
            raise TypeError(f"{cls.__name__}: keyword-only fields need @dataclass")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        fields = dataclasses.fields(self)
        names = [f.name for f in fields if f.init]
        if len(args) > len(names):
            raise TypeError(f"{type(self).__name__}() takes at most {len(names)} arguments")
        values = dict(zip(names, args))
        for name, value in kwargs.items():
            if name not in names or name in values:
                raise TypeError(f"{type(self).__name__}() got an unexpected or repeated "
                                f"argument {name!r}")
            values[name] = value
        for f in fields:
            if f.name in values:
                value = values[f.name]
            elif f.default is not dataclasses.MISSING:
                value = f.default
            elif f.default_factory is not dataclasses.MISSING:
                value = f.default_factory()
            elif f.init:
                raise TypeError(f"{type(self).__name__}() missing argument {f.name!r}")
            else:
                continue
            object.__setattr__(self, f.name, value)
        if hasattr(self, "__post_init__"):
            self.__post_init__()

    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}"
                          for f in dataclasses.fields(self) if f.repr)
        return f"{type(self).__qualname__}({shown})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._compared() == other._compared()  # type: ignore[attr-defined]

    __hash__ = None  # type: ignore[assignment]  # as @dataclass: compared by value, mutable

    def _compared(self) -> tuple:
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self) if f.compare)


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
class Frozen(Record):
    """An immutable record, as `@dataclass(frozen=True)` makes one (see the module
    docstring)."""

    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, f.name) for f in dataclasses.fields(self)
                          if (f.compare if f.hash is None else f.hash)))
