"""The red team proves itself: each attack (tests/trust/attacks.py), run with the
defences it names switched off (tests/trust/defences.py), gets what it wanted. An
attack that fails even then tests nothing — its payload never arrived, or its outcome
is read where nothing could show — and so does a defence no attack names.

These run in a lab of their own: with a defence off, an attack may change what the
others read (bob's memory, his tasks).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.trust.catalogue import ATTACKS, Scenario
from tests.trust.defences import DEFENCES, switched_off
from tests.trust.lab import Lab


@pytest.fixture(scope="module")
def lab_without_defences(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    lab = Lab(tmp_path_factory.mktemp("trust-off"))
    try:
        yield lab
    finally:
        lab.close()


@pytest.mark.parametrize("attack", ATTACKS.values(), ids=ATTACKS.keys())
def test_the_attack_succeeds_with_its_defence_off(lab_without_defences: Lab,
                                                   attack: Scenario) -> None:
    with switched_off(lab_without_defences, attack.defences):
        outcome = attack(lab_without_defences)
    assert outcome.happened, (f"[{attack.channel}] with {', '.join(attack.defences)} off: "
                              f"{outcome.evidence}")


def test_every_defence_is_tested_by_an_attack():
    named = {name for attack in ATTACKS.values() for name in attack.defences}
    assert set(DEFENCES) == named, set(DEFENCES) - named


def test_a_secret_merged_beside_another_still_leaves_a_trace():
    # FTS5 keeps a term as the part it does not share with the term before it: once two
    # forgotten secrets share a segment, the second's whole text is no longer in the file
    # (CI caught the forgetting attack failing with its defence off this way).
    import apsw

    from tests.trust.scenario import leaves_a_trace

    con = apsw.Connection(":memory:")
    con.execute("CREATE VIRTUAL TABLE notes USING fts5(content)")
    first, second = "quokka0a1b2c3d4e5f6a7b", "quokka0f9e8d7c6b5a4f3e"
    con.executemany("INSERT INTO notes (content) VALUES (?)", [(first,), (second,)])
    con.execute("INSERT INTO notes (notes) VALUES ('optimize')")
    index = b"".join(block for (block,) in con.execute("SELECT block FROM notes_data")
                     if isinstance(block, bytes))
    assert second.encode() not in index
    assert leaves_a_trace(first, index) and leaves_a_trace(second, index)
