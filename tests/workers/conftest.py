"""Fixtures of the worker tests (helpers they share are in tests/workers/support.py)."""

from __future__ import annotations

import pytest

from tests.workers.support import bound_queue, scripted_queue

__all__ = ["bound_queue"]  # a fixture every queue test here may ask for


@pytest.fixture
def cfg(config, data_dir, fake_ollama, bound_queue):
    """The worker's config with its queue run in this process, three attempts a job.
    A module whose jobs need another queue defines its own `cfg`."""
    return scripted_queue(config, fake_ollama, bound_queue, max_attempts=3)
