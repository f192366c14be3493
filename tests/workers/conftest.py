"""Fixtures of the worker tests (helpers they share are in tests/workers/support.py)."""

from __future__ import annotations

import pytest

from app.model.client import ModelClient
from tests.workers.support import bound_queue, scripted_model, scripted_queue, worker_config

__all__ = ["bound_queue"]  # a fixture every queue test here may ask for


@pytest.fixture
def job_parts(config, data_dir, writer, fake_ollama):
    """What a job is called with: the worker's config, the writer, and a model client on
    the scripted fake model (and the fake itself)."""
    cfg = worker_config(config, fake_ollama)
    fake_ollama.responder = scripted_model
    with ModelClient.from_config(cfg) as model:
        yield cfg, writer, model, fake_ollama


@pytest.fixture
def cfg(config, data_dir, fake_ollama, bound_queue):
    """The worker's config with its queue run in this process, three attempts a job.
    A module whose jobs need another queue defines its own `cfg`."""
    return scripted_queue(config, fake_ollama, bound_queue, max_attempts=3)
