"""The catalogue itself: enough attacks, through every channel, each with what is checked;
a benign suite of the same size."""

from __future__ import annotations

from collections import Counter

from tests.trust.catalogue import ATTACKS, BENIGN, CHANNELS


def test_at_least_thirty_attacks_come_through_every_channel():
    assert len(ATTACKS) >= 30
    by_channel = Counter(attack.channel for attack in ATTACKS.values())
    assert set(by_channel) == set(CHANNELS), set(CHANNELS) - set(by_channel)


def test_the_benign_suite_is_as_large_as_the_attacks():
    assert len(BENIGN) >= len(ATTACKS)


def test_every_scenario_says_what_is_checked_and_has_one_name():
    scenarios = [*ATTACKS.values(), *BENIGN.values()]
    assert all(s.check for s in scenarios)
    assert len({s.name for s in scenarios}) == len(scenarios)
