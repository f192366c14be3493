"""What the defences must leave working (tests/trust/benign.py), one test each: a
user's own chats and memory over HTTP and MCP with their token, commands they allowed or
approve in `hilo chat`, trusted tasks that read their own memory and act on it, macros
learned from calls they approved or trusted, their own imports."""

from __future__ import annotations

import pytest

from tests.trust.catalogue import BENIGN, Scenario
from tests.trust.lab import Lab


@pytest.mark.parametrize("scenario", BENIGN.values(), ids=BENIGN.keys())
def test_the_user_gets_what_they_asked_for(lab: Lab, scenario: Scenario) -> None:
    outcome = scenario(lab)
    assert outcome.happened, f"[{scenario.channel}] {outcome.evidence}"
