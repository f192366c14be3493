"""Records (app/records.py) behave as the dataclasses they stand for: `Record` as
`@dataclass`, `Frozen` as `@dataclass(frozen=True)`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import pytest

from app.records import Frozen, Record


class Note(Record):
    text: str
    tags: list[str] = field(default_factory=list)
    seen: int = field(default=0, compare=False)
    secret: str = field(default="", repr=False)
    length: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.length = len(self.text)


@dataclass
class NoteAsDataclass:
    text: str
    tags: list[str] = field(default_factory=list)
    seen: int = field(default=0, compare=False)
    secret: str = field(default="", repr=False)
    length: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.length = len(self.text)


class Point(Frozen):
    x: int
    y: int = 0
    label: str = field(default="", compare=False)


@dataclass(frozen=True)
class PointAsDataclass:
    x: int
    y: int = 0
    label: str = field(default="", compare=False)


def shown(record: object) -> str:
    return repr(record).split("(", 1)[1]  # the fields, without the class name


def test_a_record_is_built_shown_and_compared_as_a_dataclass():
    calls = [(("hi",), {}), (("hi", ["a"]), {"seen": 3}), ((), {"text": "x", "secret": "s"})]
    for args, kwargs in calls:
        ours, theirs = Note(*args, **kwargs), NoteAsDataclass(*args, **kwargs)
        assert shown(ours) == shown(theirs)
        assert dataclasses.asdict(ours) == dataclasses.asdict(theirs)
    assert Note("hi", seen=1) == Note("hi", seen=2) != Note("ho")
    assert Note("hi") != NoteAsDataclass("hi")
    assert Note("hi").tags is not Note("hi").tags  # a fresh default each time


def test_a_record_is_mutable_and_unhashable_as_a_dataclass():
    note = Note("hi")
    note.seen = 5
    assert note.seen == 5
    with pytest.raises(TypeError):
        hash(note)
    assert dataclasses.replace(note, text="hello") == Note("hello")


def test_a_frozen_record_is_immutable_and_hashable_as_a_frozen_dataclass():
    point = Point(1, 2, "a")
    assert shown(point) == shown(PointAsDataclass(1, 2, "a"))
    assert hash(point) == hash(PointAsDataclass(1, 2, "a")) == hash(Point(1, 2, "b"))
    for change in (lambda: setattr(point, "x", 3), lambda: delattr(point, "x")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            change()
    assert dataclasses.replace(point, y=5) == Point(1, 5)


@pytest.mark.parametrize("args, kwargs", [((), {}), ((1, 2, "a", "b"), {}), ((1,), {"x": 2}),
                                          ((1,), {"z": 2})])
def test_arguments_a_dataclass_refuses_are_refused(args, kwargs):
    with pytest.raises(TypeError):
        PointAsDataclass(*args, **kwargs)
    with pytest.raises(TypeError):
        Point(*args, **kwargs)
