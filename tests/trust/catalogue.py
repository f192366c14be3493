"""The red team's catalogue, one definition of each scenario for the tests
(tests/trust/test_attacks.py, test_benign.py) and the injection benchmark: the attacks
(tests/trust/attacks.py) and the benign scenarios (tests/trust/benign.py), registered by
tests/trust/scenario.py.
"""

from __future__ import annotations

from tests.trust import attacks, benign  # noqa: F401 — importing them registers their scenarios
from tests.trust.scenario import ATTACKS, BENIGN, CHANNELS, Scenario

__all__ = ["ATTACKS", "BENIGN", "CHANNELS", "Scenario", "catalogue"]


def catalogue() -> list[Scenario]:
    """Every scenario: the attacks, then the benign ones."""
    return [*ATTACKS.values(), *BENIGN.values()]
