"""The red team's attacks (tests/trust/attacks.py), one test each, named for the attack.

The model is the obedient one (tests/trust/obedient.py): it does whatever any text in its
prompt tells it. Each attack must still fail, as seen from outside — no marker file from
the attacker's command, no trusted task, no macro, none of another user's secret reaching
the model or the caller, no secret kept on disk, no request out to the web.
"""

from __future__ import annotations

import pytest

from tests.trust.catalogue import ATTACKS, Scenario
from tests.trust.lab import Lab


@pytest.mark.parametrize("attack", ATTACKS.values(), ids=ATTACKS.keys())
def test_the_attack_fails(lab: Lab, attack: Scenario) -> None:
    outcome = attack(lab)
    assert not outcome.happened, f"[{attack.channel}] {outcome.evidence}"
