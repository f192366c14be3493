"""Fixtures of the learning tests: a learning step is called as the worker calls it."""

from __future__ import annotations

import pytest

from app.model.client import ModelClient
from tests.workers.support import scripted_model, worker_config


@pytest.fixture
def job_parts(config, data_dir, writer, fake_ollama):
    """What a learning step is called with: the worker's config, the writer, and a model
    client on the scripted fake model (and the fake itself)."""
    cfg = worker_config(config, fake_ollama)
    fake_ollama.responder = scripted_model
    with ModelClient.from_config(cfg) as model:
        yield cfg, writer, model, fake_ollama
