"""LongMemEval, the second development set: what a chat assistant is told of a user's
past conversations with it, scored as tests/bench/locomo.py scores LoCoMo.

LongMemEval (Wu et al., ICLR 2025; github.com/xiaowu0162/LongMemEval, MIT licence) asks
500 questions, each after its own history of timestamped user–assistant chat sessions
(LongMemEval_S: ~50 sessions, ~115k tokens), and marks the turns that hold the answer
(`has_answer`). Unlike LoCoMo's two friends it is a person talking to an assistant, as
Hilo's users do: long assistant replies, questions about what either side said, a
preference, an update, a date. Each question's history becomes one Hilo user, stored as
a chat stores it (locomo.py's product form: the role as sent, the session's time as
`created_at`, a second per turn); no name in the profile (the user gives none). The
question is asked at its `question_date`. Abstention questions (`_abs`: the history
does not hold the answer) and questions whose evidence no turn marks are left out.

Development and held-out halves: each question falls in one by a hash of its id
(stable, whatever order the file lists them), and a run takes the first `--questions`
of each half in that hash's order (the whole half with 0): a history is ~500 turns to
embed, so the default is a sample.

The data is 264 MB, too large to commit and not obtainable from this bench: download
`longmemeval_s_cleaned.json` from the dataset's page (the link in LongMemEval's README)
into `.cache/longmemeval/` (ignored by git), or pass `--data PATH`.

    python -m tests.bench.longmemeval [--quick] [--json] [--data PATH]
                                      [--split both|development|held-out] [--questions N] [--jobs N]
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from app.model.embedders import LOCAL_MODEL
from tests.bench import local_embedders
from tests.bench.locomo import (
    ABOUT,
    Conversation,
    Form,
    Question,
    Turn,
    bench_results,
    markdown,
)
from tests.bench.report import REPO_ROOT, emit, parser, record_held_out

DEFAULT_DATA = Path(".cache/longmemeval/longmemeval_s_cleaned.json")
QUESTION_TYPES = {1: "single-session-user", 2: "single-session-assistant",
                  3: "single-session-preference", 4: "multi-session",
                  5: "temporal-reasoning", 6: "knowledge-update"}
CATEGORY_OF = {name: number for number, name in QUESTION_TYPES.items()}
QUESTIONS = 60  # of each half, by default
QUICK_QUESTIONS = 8


def parse_date(text: str) -> datetime:
    """LongMemEval's "2023/05/20 (Sat) 02:21" as UTC."""
    day, _, clock = text.split(" ")
    return datetime.strptime(f"{day} {clock}", "%Y/%m/%d %H:%M").replace(tzinfo=UTC)


def half(question_id: str) -> str:
    """The half a question belongs to, by a hash of its id: "development" or "held-out"."""
    digest = hashlib.sha256(question_id.encode()).digest()
    return "development" if digest[0] % 2 == 0 else "held-out"


def _order(question_id: str) -> bytes:
    return hashlib.sha256(b"order:" + question_id.encode()).digest()


def conversation(item: dict) -> Conversation | None:
    """One question and its history as a Conversation; None when nothing marks its evidence."""
    turns: list[Turn] = []
    evidence: set[str] = set()
    sessions = zip(item["haystack_dates"], item["haystack_sessions"], strict=True)
    for s, (date, session) in enumerate(sessions, start=1):
        start = parse_date(date)
        for t, turn in enumerate(session, start=1):
            dia_id = f"D{s}:{t}"
            # Turns a second apart keep their order within the session.
            turns.append(Turn(dia_id, s, turn["role"], turn["content"],
                              start + timedelta(seconds=t), ""))
            if turn.get("has_answer"):
                evidence.add(dia_id)
    if not evidence or not turns:
        return None
    category = CATEGORY_OF.get(item["question_type"])
    if category is None:
        return None
    question = Question(item["question"], category, frozenset(evidence), str(item["answer"]))
    return Conversation(item["question_id"], "user", "assistant", turns, [question],
                        asked_at=parse_date(item["question_date"]))


def load(path: Path, role: str, limit: int) -> list[Conversation]:
    """The first `limit` answerable questions of one half (0: all), in the hash's order."""
    items = [item for item in json.loads(path.read_text(encoding="utf-8"))
             if not item["question_id"].endswith("_abs") and half(item["question_id"]) == role]
    items.sort(key=lambda item: _order(item["question_id"]))
    conversations = []
    for item in items:
        if limit and len(conversations) >= limit:
            break
        found = conversation(item)
        if found is not None:
            conversations.append(found)
    return conversations


ABOUT_LONGMEMEVAL = ABOUT.replace("a new session;", "a new session, at the question's date;")


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--data", type=Path, default=DEFAULT_DATA,
                   help="longmemeval_s_cleaned.json (relative paths are from the repository root)")
    p.add_argument("--split", choices=("both", "development", "held-out"), default="both",
                   help="which half (only `both` is recorded in BENCHMARKS.md)")
    p.add_argument("--questions", type=int, default=QUESTIONS,
                   help="questions of each half, in the hash's order (0: all)")
    p.add_argument("--jobs", type=int, default=1,
                   help="score this many halves at once, each in a process of its own")
    args = p.parse_args()
    path = args.data if args.data.is_absolute() else (REPO_ROOT / args.data).resolve()
    if not path.exists():
        raise SystemExit(
            f"LongMemEval data not found at {path}: download longmemeval_s_cleaned.json "
            "(the link is in github.com/xiaowu0162/LongMemEval's README) into "
            ".cache/longmemeval/, or pass --data PATH")
    limit = QUICK_QUESTIONS if args.quick else args.questions
    roles = {"development": "development", "held out": "held-out"}
    if args.quick:
        roles = {"development (quick)": "development"}
    elif args.split != "both":
        roles = {k: v for k, v in roles.items() if v == args.split}
        args.no_write = True  # a partial run does not replace the recorded one
    if limit != QUESTIONS:
        args.no_write = True  # BENCHMARKS.md records the default sample
    runs = {name: (lambda role=role: load(path, role, limit), role)
            for name, role in roles.items()}
    results = bench_results(lambda: local_embedders.make(LOCAL_MODEL), Form("product"), runs,
                            QUESTION_TYPES,
                            f"LongMemEval_S, {limit or 'all'} answerable questions a half",
                            jobs=args.jobs)
    results["form"] += "; no name in the profile (LongMemEval's user gives none)"
    if "held-out" in roles.values():
        results["held_out_runs"] = record_held_out("longmemeval", results)
    emit(args, "longmemeval", results, markdown(results, ABOUT_LONGMEMEVAL))


if __name__ == "__main__":
    main()
