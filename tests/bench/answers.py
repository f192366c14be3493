"""Does a model answer better with Hilo's memory? LoCoMo questions, answered three ways.

The held-out LoCoMo conversations (conv-47 to conv-50; tests/bench/locomo.py: stored as
a chat would store them, one Hilo user each, embedded with the local embedder, no
model: their memory is the raw conversation, no facts, cards or diary) and a sample of
their questions (categories 1-4), each asked by the same chat model three ways:

- **hilo**: the messages `build_context` gives the model for a new session whose first
  message is the question, as `hilo serve` builds them (make_query with the memory and
  the embedder, the product's defaults: num_ctx 4,096, the reply reserve, the first
  message's retrieved budget);
- **none**: the same system prompt and question with no memory;
- **cut**: the whole conversation as chat messages, cut to the most recent turns that
  fit num_ctx less the reply reserve (what a client without memory sends), then the
  question.

Every lane's system prompt is Hilo's default plus "Answer with a short phrase." (LoCoMo's
question prompt asks for one), temperature 0, at most 32 tokens. Scored as the LoCoMo
paper scores (snap-research/locomo, task_eval/evaluation.py, `eval_question_answering`):
token F1 after its normalisation (commas dropped, lower case, punctuation and the words
a, an, the, and removed, Porter stems); category 1 (multi-hop) splits prediction and
answer on commas and averages each answer part's best F1; category 3 takes the answer
before its first ";". Means come with bootstrap 95% intervals (questions resampled,
2,000 times, seed 38), and the paired difference hilo − none with its own.

    python -m tests.bench.answers [--quick] [--json] [--no-write] [--per-category N]
        [--url URL --model NAME --provider ollama|openai] [--data PATH]

Without --url it serves SmolLM2-135M-Instruct (tests/bench/packaged_model.py) on the
llama-server tests/bench/engine.py builds. With your own server, e.g. Ollama with the
README's model: `--url http://127.0.0.1:11434 --model gemma3:4b --provider ollama`.
Questions are sampled per category (--per-category, default 25; seed 38), the same
sample for every lane and model. --quick: 3 per category; BENCHMARKS.md is not touched.
What it leaves out: LoCoMo's adversarial category 5, the photos' captions, and learning
(no facts or cards: tests/bench/learning.py measures those).
"""

from __future__ import annotations

import random
import re
import string
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from nltk.stem import PorterStemmer

from app.config import Config
from app.db import Durability, connect_readonly
from app.learn.embed import embed_pending
from app.model.embedders import LOCAL_MODEL
from app.model.token_count import TokenCounter
from app.recall.query import make_query
from app.recall.state import Recall
from app.turn.context import DEFAULT_SYSTEM_PROMPT, ContextRequest, build_context
from app.writer import Writer
from tests.bench import local_embedders
from tests.bench.locomo import (
    CATEGORIES,
    DEFAULT_DATA,
    HELD_OUT,
    QUESTION_SESSION,
    Conversation,
    Form,
    Question,
    ingest,
    load,
)
from tests.bench.report import REPO_ROOT, emit, parser

LANES = ("hilo", "none", "cut")
SEED = 38
RESAMPLES = 2000
REPLY_TOKENS = 32
SYSTEM = DEFAULT_SYSTEM_PROMPT + " Answer with a short phrase."
_STEMMER = PorterStemmer()
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")


def log(message: str) -> None:
    print(f"[answers] {message}", file=sys.stderr, flush=True)


# -- LoCoMo's scoring -------------------------------------------------------------------------


def normalize_answer(text: str) -> str:
    """LoCoMo's normalisation: no commas, lower case, no punctuation, no a/an/the/and."""
    text = text.replace(",", "").lower()
    text = "".join(ch for ch in text if ch not in string.punctuation)
    return " ".join(_ARTICLES.sub(" ", text).split())


def token_f1(prediction: str, answer: str) -> float:
    """F1 of the Porter-stemmed tokens of the normalised prediction and answer."""
    predicted = [_STEMMER.stem(w) for w in normalize_answer(prediction).split()]
    wanted = [_STEMMER.stem(w) for w in normalize_answer(answer).split()]
    same = sum((Counter(predicted) & Counter(wanted)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(predicted), same / len(wanted)
    return 2 * precision * recall / (precision + recall)


def answer_tokens_shown(prompt: str, answer: str) -> float:
    """The share of the answer's normalised, stemmed tokens that the prompt holds: what a
    model could copy, at best."""
    wanted = [_STEMMER.stem(w) for w in normalize_answer(answer).split()]
    if not wanted:
        return 0.0
    shown = {_STEMMER.stem(w) for w in normalize_answer(prompt).split()}
    return sum(w in shown for w in wanted) / len(wanted)


def multi_answer_f1(prediction: str, answer: str) -> float:
    """Multi-hop: each comma-separated part of the answer scored against its best part
    of the prediction, averaged."""
    predicted = [p.strip() for p in prediction.split(",")]
    return float(np.mean([max(token_f1(p, part.strip()) for p in predicted)
                          for part in answer.split(",")]))


def locomo_f1(prediction: str, answer: str, category: int) -> float:
    """A question's score as LoCoMo's eval_question_answering gives it (categories 1-4)."""
    if category == 3:
        answer = answer.split(";")[0].strip()
    if category == 1:
        return multi_answer_f1(prediction, answer)
    return token_f1(prediction, answer)


def bootstrap_interval(values: list[float], resamples: int = RESAMPLES,
                       seed: int = SEED) -> tuple[float, float, float]:
    """(mean, 2.5th, 97.5th percentile of the resampled means)."""
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return (float("nan"),) * 3
    picks = np.random.default_rng(seed).integers(0, data.size, (resamples, data.size))
    means = data[picks].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(data.mean()), float(low), float(high)


def sample_questions(conversations: list[Conversation], per_category: int,
                     seed: int = SEED) -> list[tuple[Conversation, Question]]:
    """`per_category` questions of each category (all, if it has fewer), drawn with a
    fixed seed from the conversations' questions in their order."""
    pool = [(c, q) for c in conversations for q in c.questions]
    rng = random.Random(seed)
    chosen: list[tuple[Conversation, Question]] = []
    for category in sorted(CATEGORIES):
        of_category = [item for item in pool if item[1].category == category]
        chosen += rng.sample(of_category, min(per_category, len(of_category)))
    return chosen


# -- the prompts ------------------------------------------------------------------------------


def cut_history(conv: Conversation, form: Form, budget: int, counter: TokenCounter,
                model: str) -> list[dict]:
    """The conversation's most recent turns, as chat messages, that fit `budget` tokens
    beside the system prompt (the question's tokens are left to the reply reserve)."""
    ratio = counter.chars_per_token(model)
    left = budget - len(SYSTEM) / ratio
    kept: list[dict] = []
    for turn in reversed(conv.turns):
        message = {"role": form.role(conv, turn), "content": form.content(turn)}
        cost = (len(message["content"]) + 8) / ratio  # a few tokens of the template's
        if cost > left:
            break
        kept.append(message)
        left -= cost
    return kept[::-1]


@dataclass
class Asked:
    conversation: str
    question: str
    category: int
    answer: str
    replies: dict[str, str] = field(default_factory=dict)
    scores: dict[str, float] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    prompt_chars: dict[str, int] = field(default_factory=dict)
    answer_shown: dict[str, float] = field(default_factory=dict)


class ChatModel:
    """One chat call to Ollama's /api/chat or an OpenAI-compatible /v1/chat/completions."""

    def __init__(self, url: str, model: str, provider: str, num_ctx: int) -> None:
        self.url, self.model, self.provider, self.num_ctx = url.rstrip("/"), model, provider, num_ctx
        self.client = httpx.Client(timeout=600)

    def answer(self, messages: list[dict]) -> str:
        if self.provider == "ollama":
            response = self.client.post(f"{self.url}/api/chat", json={
                "model": self.model, "messages": messages, "stream": False,
                "options": {"temperature": 0, "seed": SEED, "num_predict": REPLY_TOKENS,
                            "num_ctx": self.num_ctx}})
            response.raise_for_status()
            return response.json()["message"]["content"] or ""
        response = self.client.post(f"{self.url}/v1/chat/completions", json={
            "model": self.model, "messages": messages, "temperature": 0, "seed": SEED,
            "max_tokens": REPLY_TOKENS})
        response.raise_for_status()
        return response.json()["choices"][0]["message"]["content"] or ""

    def close(self) -> None:
        self.client.close()


def ask_all(conversations: list[Conversation], sample: list[tuple[Conversation, Question]],
            chat: ChatModel, workdir: Path) -> tuple[list[Asked], dict[str, Any]]:
    """Every sampled question in every lane; the memories built first."""
    config = Config().replace(llm={"num_ctx": chat.num_ctx, "provider": chat.provider,
                                   "chat_model": chat.model})
    form = Form("product")
    embedder = local_embedders.make(LOCAL_MODEL)
    counter = TokenCounter()
    budget = config.llm.num_ctx - config.llm.reply_reserve
    began = time.perf_counter()
    paths = {}
    for conv in conversations:
        if not any(c is conv for c, _ in sample):
            continue
        paths[conv.sample_id] = workdir / f"{conv.sample_id}.sqlite3"
        with Writer(paths[conv.sample_id], Durability.NORMAL) as writer:
            ingest(writer, config, conv, form)
            while embed_pending(writer, embedder, limit=4096, batch_size=64):
                pass
    memory_s = time.perf_counter() - began
    log(f"memories built in {memory_s:.0f} s; asking {len(sample)} questions")
    recall = Recall()
    asked: list[Asked] = []
    prompts: list[dict[str, list[dict]]] = []
    for conv, q in sample:
        asked.append(Asked(conv.sample_id, q.text, q.category, q.answer))
        con = connect_readonly(paths[conv.sample_id])
        try:
            query = make_query(conv.sample_id, q.text, embedder, recall=recall, con=con,
                               now=conv.turns[-1].when + timedelta(minutes=1))
            built = build_context(con, config, counter, ContextRequest(
                conv.sample_id, q.text, session_id=QUESTION_SESSION, window=[], query=query,
                client_system=SYSTEM))
        finally:
            con.close()
        question = {"role": "user", "content": q.text}
        prompts.append({
            "hilo": built.messages,
            "none": [{"role": "system", "content": SYSTEM}, question],
            "cut": [{"role": "system", "content": SYSTEM},
                    *cut_history(conv, form, budget, counter, chat.model), question],
        })
    # A conversation's questions one lane after another: the cut history is the same
    # prefix each time, which the server's prompt cache keeps, as it would for a client.
    order = sorted(range(len(sample)), key=lambda i: sample[i][0].sample_id)
    for lane in LANES:
        for done, i in enumerate(order, 1):
            record, messages = asked[i], prompts[i][lane]
            started = time.perf_counter()
            reply = chat.answer(messages)
            record.seconds[lane] = round(time.perf_counter() - started, 3)
            record.replies[lane] = reply
            record.scores[lane] = locomo_f1(reply, record.answer, record.category)
            told = "\n".join(str(m.get("content") or "") for m in messages)
            record.prompt_chars[lane] = len(told)
            record.answer_shown[lane] = answer_tokens_shown(told, record.answer)
            if done % 25 == 0:
                log(f"{lane}: {done} of {len(sample)} questions")
    return asked, {"memory_build_s": round(memory_s, 1)}


# -- the report -------------------------------------------------------------------------------


def summarise(asked: list[Asked]) -> dict[str, Any]:
    def interval(values: list[float]) -> dict[str, float]:
        mean, low, high = bootstrap_interval(values)
        return {"mean": round(mean, 3), "low": round(low, 3), "high": round(high, 3),
                "n": len(values)}

    lanes: dict[str, Any] = {}
    for lane in LANES:
        lanes[lane] = {
            "f1": interval([a.scores[lane] for a in asked]),
            "categories": {CATEGORIES[c]: interval([a.scores[lane] for a in asked
                                                    if a.category == c])
                           for c in sorted(CATEGORIES)},
            "seconds_mean": round(float(np.mean([a.seconds[lane] for a in asked])), 2),
            "prompt_chars_mean": round(float(np.mean([a.prompt_chars[lane] for a in asked]))),
            "answer_shown_mean": round(float(np.mean([a.answer_shown[lane] for a in asked])), 3),
        }
    differences = {}
    for other in ("none", "cut"):
        differences[f"hilo - {other}"] = {
            "all": interval([a.scores["hilo"] - a.scores[other] for a in asked]),
            **{CATEGORIES[c]: interval([a.scores["hilo"] - a.scores[other] for a in asked
                                        if a.category == c]) for c in sorted(CATEGORIES)}}
    return {"lanes": lanes, "differences": differences}


def _ci(cell: dict) -> str:
    return f"{cell['mean']:.3f} [{cell['low']:.3f}, {cell['high']:.3f}]"


def markdown(results: dict) -> str:
    s = results["summary"]
    head = ["lane", "F1, all [95% CI]", *[f"{name} (n={s['lanes']['hilo']['categories'][name]['n']})"
                                          for name in CATEGORIES.values()],
            "answer's words in the prompt (mean)", "prompt chars (mean)",
            "s per answer (mean)"]
    lines = [
        f"Model: {results['model']} ({results['provider']} at {results['where']}), "
        f"temperature 0, replies of at most {REPLY_TOKENS} tokens, num_ctx "
        f"{results['num_ctx']}. Held-out LoCoMo conversations {', '.join(results['conversations'])}; "
        f"{results['questions']} questions, {results['per_category']} per category drawn with "
        f"seed {SEED} (all of a category that has fewer). Memory: the conversations as a chat "
        f"stores them, embedded with {LOCAL_MODEL} (built in {results['memory_build_s']} s); "
        "no facts, cards or diary. Scored with LoCoMo's token F1 (task_eval/evaluation.py); "
        f"bootstrap 95% intervals over the questions ({RESAMPLES} resamples). "
        f"Time per question, all three lanes: {results['seconds_per_question']} s. "
        "The machine is shared with other work.",
        "",
        "| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1),
    ]
    names = {"hilo": "Hilo's context", "none": "no memory", "cut": "history cut to num_ctx"}
    for lane in LANES:
        cell = s["lanes"][lane]
        lines.append(f"| {names[lane]} | {_ci(cell['f1'])} | "
                     + " | ".join(f"{cell['categories'][n]['mean']:.3f}"
                                  for n in CATEGORIES.values())
                     + f" | {cell['answer_shown_mean']:.3f} | {cell['prompt_chars_mean']:,} | "
                     f"{cell['seconds_mean']} |")
    lines += ["", "Paired differences (the same questions):", "",
              "| | all [95% CI] | " + " | ".join(CATEGORIES.values()) + " |",
              "|---|---:|" + "---:|" * len(CATEGORIES)]
    for name, cell in s["differences"].items():
        lines.append(f"| {name} | {_ci(cell['all'])} | "
                     + " | ".join(_ci(cell[n]) for n in CATEGORIES.values()) + " |")
    diff = s["differences"]["hilo - none"]["all"]
    met = diff["low"] > 0
    lines += ["", f"Target: Hilo's context beats no memory by a margin its interval does not "
                  f"cross: **{'met' if met else 'MISSED'}** (hilo − none {_ci(diff)})."]
    examples = results["examples"]
    if examples:
        lines += ["", "The first answers (question → gold | hilo | none | cut):", ""]
        lines += [f"- {e['question']} → {e['answer']} | {e['replies']['hilo']!r} | "
                  f"{e['replies']['none']!r} | {e['replies']['cut']!r}" for e in examples]
    return "\n".join(lines)


def main() -> None:
    p = parser(__doc__.split("\n")[0])
    p.add_argument("--url", help="your model server (default: SmolLM2 on llama-server here)")
    p.add_argument("--model", help="the chat model's name on --url")
    p.add_argument("--provider", choices=("ollama", "openai"), default="openai",
                   help="the API --url speaks")
    p.add_argument("--engine-threads", type=int, default=None,
                   help="llama-server's threads here (default: all the cores)")
    p.add_argument("--num-ctx", type=int, default=4096, help="the model's context window")
    p.add_argument("--per-category", type=int, default=None,
                   help="questions drawn per category (default 25; 3 with --quick)")
    p.add_argument("--data", type=Path, default=DEFAULT_DATA,
                   help="locomo10.json (relative paths are from the repository root)")
    args = p.parse_args()
    if bool(args.url) != bool(args.model):
        raise SystemExit("--url and --model go together: the server and the model on it")
    path = args.data if args.data.is_absolute() else (REPO_ROOT / args.data).resolve()
    if not path.exists():
        raise SystemExit(f"LoCoMo data not found at {path}: pass --data PATH to locomo10.json")
    per_category = args.per_category or (3 if args.quick else 25)
    conversations = load(path, HELD_OUT)
    sample = sample_questions(conversations, per_category)
    engine = None
    if args.url:
        url, model, provider, where = args.url, args.model, args.provider, args.url
    else:
        from tests.bench.engine import CONTEXT, Engine, llama_server
        from tests.bench.packaged_model import SMOLLM2, packaged_model

        logs = Path(tempfile.mkdtemp(prefix="hilo-bench-answers-engine-"))
        engine = Engine(llama_server(), packaged_model(SMOLLM2), logs, alias=SMOLLM2.name,
                        threads=args.engine_threads)
        engine.start()
        url, model, provider = engine.url, SMOLLM2.name, "openai"
        where = (f"llama-server here, {engine.threads} threads, {SMOLLM2.described}")
        args.num_ctx = CONTEXT
    chat = ChatModel(url, model, provider, args.num_ctx)
    began = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            asked, built = ask_all(conversations, sample, chat, Path(tmp))
    finally:
        chat.close()
        if engine is not None:
            engine.stop()
    elapsed = time.perf_counter() - began - built["memory_build_s"]
    results = {"model": model, "provider": provider, "where": where, "num_ctx": args.num_ctx,
               "conversations": list(HELD_OUT), "questions": len(asked),
               "per_category": per_category, **built,
               "seconds_per_question": round(elapsed / max(1, len(asked)), 2),
               "summary": summarise(asked),
               "examples": [{"question": a.question, "answer": a.answer, "replies": a.replies}
                            for a in asked[::max(1, len(asked) // 6)][:6]],
               "asked": [a.__dict__ for a in asked]}
    section = "answers" if not args.url else f"answers-{model.replace(':', '-')}"
    emit(args, section, results, markdown(results))


if __name__ == "__main__":
    main()
