"""One lab (tests/trust/lab.py) for the whole trust suite: the servers start once, and
each scenario keeps to a user and a working folder of its own."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.trust.lab import Lab


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    lab = Lab(tmp_path_factory.mktemp("trust"))
    try:
        yield lab
    finally:
        lab.close()
