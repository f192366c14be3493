"""The local embedder's model on ONNX Runtime: the same vectors as sentence-transformers,
exported once per machine, and no torch in a process once the export exists."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from app.errors import EmbedderUnavailable
from app.model import minilm
from app.model.embedders import LOCAL_DIM

REPO = Path(__file__).resolve().parents[2]


def test_the_vectors_are_sentence_transformers_vectors_for_the_model(local_embedder):
    # Sorted passes padded to their longest text, in the caller's order, against the
    # model run one text at a time by the library that defines it.
    sentence_transformers = pytest.importorskip("sentence_transformers")
    texts = [f"turn {i}: " + "we talked about the garden " * (i % 7) for i in range(40)]
    texts += ["", "ok", "¿Qué dije de la boda de mi hermana en Lisboa?", "word " * 400]
    vectors = local_embedder.embed(texts)
    reference = sentence_transformers.SentenceTransformer(
        str(minilm.shipped_weights()), device="cpu", local_files_only=True).encode(
        texts, batch_size=1, normalize_embeddings=True, convert_to_numpy=True)
    assert vectors.shape == (len(texts), LOCAL_DIM) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert float(np.min(np.sum(vectors * reference, axis=1))) > 0.9999
    assert local_embedder.embed([]).shape == (0, LOCAL_DIM)


def fake_weights(folder: Path, config: str = '{"hidden_size": 384}') -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(config)
    (folder / "model.safetensors").write_bytes(b"weights")
    return folder


def test_the_model_is_exported_once_then_reused(tmp_path, monkeypatch):
    exports = []

    def export(weights, path):
        exports.append(weights)
        path.write_bytes(b"onnx")

    monkeypatch.setattr(minilm, "_export", export)
    weights, cache = fake_weights(tmp_path / "w"), tmp_path / "cache"

    first = minilm.exported_file(weights, cache)
    again = minilm.exported_file(weights, cache)
    newer = minilm.exported_file(fake_weights(tmp_path / "w2", '{"hidden_size": 768}'), cache)

    assert first == again and first.read_bytes() == b"onnx" and len(exports) == 2
    assert newer != first  # other weights, another file
    assert sorted(p.suffix for p in cache.iterdir()) == [".lock", ".lock", ".onnx", ".onnx"]


def test_an_export_that_fails_leaves_no_file_that_would_be_reused(tmp_path, monkeypatch):
    def broken(weights, path):
        path.write_bytes(b"half a graph")
        raise RuntimeError("killed mid-export")

    monkeypatch.setattr(minilm, "_export", broken)
    weights, cache = fake_weights(tmp_path / "w"), tmp_path / "cache"
    with pytest.raises(RuntimeError):
        minilm.exported_file(weights, cache)
    assert not list(cache.glob("*.onnx")) and not list(cache.glob("*.partial"))


def test_without_torch_and_no_export_yet_the_error_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    with pytest.raises(EmbedderUnavailable, match=r"pip install 'hilo\[local\]'"):
        minilm.exported_file(fake_weights(tmp_path / "w"), tmp_path / "cache")


def test_cache_folder_follows_xdg_cache_home(tmp_path):
    assert minilm.cache_folder({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "hilo" / "models"
    assert minilm.cache_folder({"XDG_CACHE_HOME": "relative"}) == (
        Path.home() / ".cache" / "hilo" / "models")


def test_a_process_embeds_locally_without_importing_torch_once_exported(local_embedder):
    # The fixture has exported the model; a new process (hilo serve, hilo worker) loads
    # ONNX Runtime only: torch's import was most of a start.
    probe = ("import sys; from app.model.embedders import LocalEmbedder; "
             "v = LocalEmbedder(threads=1).embed(['hello there']); "
             "print(v.shape, 'torch' in sys.modules, 'sentence_transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, cwd=REPO)
    assert out.stdout.strip() == "(1, 384) False False"
