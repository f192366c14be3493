"""RealMem, the second development set that runs here: what a chat assistant is told of
a user's past sessions with it when the user comes back to a task, scored as
tests/bench/locomo.py scores LoCoMo.

RealMem (github.com/zhiyuan5986/RealMemBench, Apache-2.0) holds ten users, each a
person talking to an assistant over ~200 dated sessions (~1,400 turns) of long-running
projects: a budget, a study plan, a trip, a job search. Some user messages are marked
as needing memory (`is_query`); the assistant's reply to each lists the memory points
it used (`memory_used`), and each point names the session and turn it was extracted
from (`extracted_memory[].source_turn`, checked against its `source_content_snapshot`).
Those turns are the question's evidence and the reply is its answer. It is what LoCoMo
is not: a person and an assistant, long assistant replies, a user returning to a plan
("What should be the next step in the study plan?") rather than a quiz.

Each question is one Hilo user holding the sessions before the question's own, stored
as a chat stores them (locomo.py's product form: role as sent, the session's date as
`created_at`, an hour between sessions of one day, a second per turn), asked as the new
user message of a new session at the question's time; evidence said earlier in the
question's own session (the window's, not recall's) and points whose turn the file no
longer holds are left out, and a question with no evidence left is skipped. No name in
the profile. Categories are RealMem's memory types.

Development and held-out halves: by user (a hash of the name; five each), so a held-out
conversation is one nothing was chosen on. Each user's questions are taken from the
middle of their history on (`--questions` a user, by default 12): histories of ~100
sessions, what a user of some months brings, and the embedding of a history is shared
by its questions.

The data (10 files, 26 MB) is fetched by the bench into `.cache/realmem/` (ignored by
git) from the repository at a pinned commit, each file checked against its SHA-256;
`--data DIR` reads it from elsewhere.

    python -m tests.bench.realmem [--quick] [--json] [--data DIR]
                                  [--split both|development|held-out] [--questions N] [--jobs N]
"""

from __future__ import annotations

import hashlib
import json
import urllib.request
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from app.model.embedders import LOCAL_MODEL, Embedder
from tests.bench import local_embedders
from tests.bench.locomo import ABOUT, Conversation, Form, Question, Turn, bench_results, markdown
from tests.bench.report import REPO_ROOT, emit, parser, record_held_out

DEFAULT_DATA = Path(".cache/realmem")
SOURCE = ("https://raw.githubusercontent.com/zhiyuan5986/RealMemBench/"
          "067c486a525b0811ef9cb8cb5ad258e286d0ce7e/dataset/")
FILES = {  # name -> SHA-256 of the file at the pinned commit
    "Adeleke_Okonjo": "9dc2a8bf2777c182108b3859be6987b4203b65bd6df5cbb6e1a02e4e9f871fdb",
    "Ethan_Hunt": "67bd20d962cd0b01c1531cc82a73a0b1a1e58ef17db6e2f743fc9b35273734ac",
    "Kenta_Tanaka": "b8fe2e606db96dbce1ffa0ab7c21b23ce83d4b5d472d80cd4bd23cd8a259d397",
    "Kim_Ji_young": "e3e286120bc5e42d3dbe513d720f969ecebf3518fbe1a4782595e927474356a9",
    "Liam_O_Connor": "2427ab7d7012b28c0da9b2a70b1763cb60630f5198cf6eeed1ee68d0271c551c",
    "Lin_Wanyu": "a7a751066c48e829b3012a94f2b365febd0e6fb6db454a6d5f4ec01f9c55008a",
    "Oliver_Smith": "25a829eb690d7f81bd47141a0cd7c174e1aa98d899111d8b04e9115f0b92e1f3",
    "Pak_Budi": "d35e08ac141e83780b8b7bc3611feef042dbd082d0986812da1d885d028b638a",
    "Sarah_Miller": "2e84cfb4e29bfceebfb4eed09b84e7a2a7cae8a908d8584830e4c94a29819a6d",
    "Sophie_Dubois": "75f71e5ec0d14606debaea409075a6e631faf6a57d74ce7ec49f17476ef44e26",
}
CATEGORIES = {1: "Dynamic Incremental", 2: "Dynamic Updating", 3: "Implicit Preference",
              4: "Temporal-reasoning"}
CATEGORY_OF = {name: number for number, name in CATEGORIES.items()}
QUESTIONS = 12  # of each user, by default
QUICK_QUESTIONS = 4
QUICK_USERS = 2


def file_name(user: str) -> str:
    return f"{user}_dialogues_256k.json"


def half(user: str) -> str:
    """The half a user belongs to: the five first by a hash of the name are development."""
    ranked = sorted(FILES, key=lambda name: hashlib.sha256(name.encode()).digest())
    return "development" if ranked.index(user) < len(ranked) // 2 else "held-out"


def parse_date(text: str) -> datetime:
    """RealMem's "2025-12-19 (Friday)" as UTC midnight."""
    return datetime.strptime(text.split(" ")[0], "%Y-%m-%d").replace(tzinfo=UTC)


def _session_starts(sessions: list[dict]) -> list[datetime]:
    """Each session's start: its date, an hour after the day's previous session; a session
    dated before the one listed ahead of it (a few are) starts an hour after that one, so
    the file's order, the order its memory points were made in, is kept."""
    starts: list[datetime] = []
    for session in sessions:
        start = parse_date(session["current_time"])
        if starts and start <= starts[-1]:
            start = starts[-1] + timedelta(hours=1)
        starts.append(start)
    return starts


def _source_turn(turns: list[dict], point: dict) -> int | None:
    """The 1-based turn a memory point came from, checked against its snapshot (most
    files count from 1, some from 0); None when no turn there holds the snapshot."""
    number, snapshot = point.get("source_turn"), point.get("source_content_snapshot")
    if not isinstance(number, int):
        return None
    for turn in (number, number + 1):
        if 1 <= turn <= len(turns) and turns[turn - 1]["content"] == snapshot:
            return turn
    return None


def _point_key(session_uuid: str, content: object) -> tuple[str, str]:
    text = content if isinstance(content, str) else json.dumps(content, sort_keys=True)
    return session_uuid, text


def conversations(data: dict, limit: int) -> tuple[list[Conversation], int]:
    """A user's first `limit` answerable questions from the middle of the history on
    (0: all of them), each with the sessions before its own; and how many were skipped."""
    user = data["_metadata"]["person_name"]
    sessions = data["dialogues"]
    starts = _session_starts(sessions)
    index_of = {s["session_uuid"]: i for i, s in enumerate(sessions)}
    points: dict[tuple[str, str], list[str]] = {}  # memory point -> its dia_ids
    for session in sessions:
        for point in session.get("extracted_memory") or []:
            owner = index_of.get(point.get("session_uuid"))
            turn = None if owner is None else _source_turn(
                sessions[owner]["dialogue_turns"], point)
            if turn is not None:
                key = _point_key(point["session_uuid"], point["content"])
                points.setdefault(key, []).append(f"D{owner + 1}:{turn}")
    turns: list[Turn] = []
    found: list[Conversation] = []
    skipped = 0
    for s, session in enumerate(sessions, start=1):
        said = session["dialogue_turns"]
        for t, turn in enumerate(said, start=1):
            if not turn.get("is_query") or s <= len(sessions) // 2:
                continue
            if limit and len(found) >= limit:
                return found, skipped
            reply = said[t] if t < len(said) else {}
            evidence = {dia_id for used in reply.get("memory_used") or []
                        for dia_id in points.get(_point_key(used["session_uuid"],
                                                            used["content"]), [])
                        if int(dia_id[1:].split(":")[0]) < s}
            category = CATEGORY_OF.get(turn.get("category_name", ""))
            if not evidence or category is None:
                skipped += 1
                continue
            question = Question(turn["content"], category, frozenset(evidence),
                                reply.get("content", ""))
            found.append(Conversation(f"{user}:{turn['query_id']}", "User", "Assistant",
                                      list(turns), [question],
                                      asked_at=starts[s - 1] + timedelta(seconds=t)))
        # The session joins the history only once its own questions are asked.
        turns.extend(Turn(f"D{s}:{t}", s, turn["speaker"], turn["content"],
                          starts[s - 1] + timedelta(seconds=t), "")
                     for t, turn in enumerate(said, start=1))
    return found, skipped


def load(directory: Path, role: str, limit: int, users: int = 0) -> list[Conversation]:
    """The questions of one half's users (the first `users` of them; 0: all)."""
    wanted = [u for u in FILES if half(u) == role]
    wanted = wanted[:users] if users else wanted
    loaded: list[Conversation] = []
    for user in wanted:
        data = json.loads((directory / file_name(user)).read_text(encoding="utf-8"))
        found, skipped = conversations(data, limit)
        if found:
            found[0].skipped_questions = skipped
        loaded.extend(found)
    return loaded


def fetch(directory: Path) -> None:
    """Download the files not yet in `directory`, each checked against its SHA-256."""
    directory.mkdir(parents=True, exist_ok=True)
    for user, digest in FILES.items():
        path = directory / file_name(user)
        if path.exists():
            continue
        url = SOURCE + file_name(user)
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                body = response.read()
        except OSError as error:
            raise SystemExit(
                f"RealMem data not found in {directory} and {url} is not reachable ({error}): "
                "copy dataset/*_dialogues_256k.json of github.com/zhiyuan5986/RealMemBench "
                f"(commit {SOURCE.split('/')[-3]}) there, or pass --data DIR") from error
        if hashlib.sha256(body).hexdigest() != digest:
            raise SystemExit(f"{url} is not the file this bench was written for "
                             "(its SHA-256 differs): the repository changed under the pin?")
        path.write_bytes(body)


class _RememberingEmbedder:
    """An embedder that embeds each text once: a user's questions share its history."""

    def __init__(self, inner: Embedder) -> None:
        self.inner, self.kind, self.model = inner, inner.kind, inner.model
        self._known: dict[str, np.ndarray] = {}

    @property
    def ready(self) -> bool:
        return self.inner.ready

    def start_loading(self) -> None:
        self.inner.start_loading()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        new = list(dict.fromkeys(t for t in texts if t not in self._known))
        if new:
            self._known.update(zip(new, self.inner.embed(new), strict=True))
        return np.stack([self._known[t] for t in texts])

    def __getattr__(self, name: str) -> object:  # embed_query, where the model has one
        return getattr(self.inner, name)


ABOUT_REALMEM = ABOUT.replace("a new session;", "a new session, at the question's time;")


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--data", type=Path, default=DEFAULT_DATA,
                   help="the folder of RealMem's *_dialogues_256k.json (relative paths are "
                        "from the repository root; fetched there when missing)")
    p.add_argument("--split", choices=("both", "development", "held-out"), default="both",
                   help="which half (only `both` is recorded in BENCHMARKS.md)")
    p.add_argument("--questions", type=int, default=QUESTIONS,
                   help="questions of each user, from the middle of the history on (0: all)")
    p.add_argument("--jobs", type=int, default=1,
                   help="score this many halves at once, each in a process of its own")
    args = p.parse_args()
    directory = args.data if args.data.is_absolute() else (REPO_ROOT / args.data).resolve()
    fetch(directory)
    limit = QUICK_QUESTIONS if args.quick else args.questions
    users = QUICK_USERS if args.quick else 0
    roles = {"development": "development", "held out": "held-out"}
    if args.quick:
        roles = {"development (quick)": "development"}
    elif args.split != "both":
        roles = {k: v for k, v in roles.items() if v == args.split}
        args.no_write = True  # a partial run does not replace the recorded one
    if limit != QUESTIONS:
        args.no_write = True  # BENCHMARKS.md records the default sample
    runs = {name: (lambda role=role: load(directory, role, limit, users), role)
            for name, role in roles.items()}
    results = bench_results(lambda: _RememberingEmbedder(local_embedders.make(LOCAL_MODEL)),
                            Form("product"), runs, CATEGORIES,
                            f"RealMem, {limit or 'all'} questions a user from the middle "
                            "of the history on", jobs=args.jobs)
    results["form"] = results["form"].replace("the user's name in the profile",
                                              "no name in the profile")
    if "held-out" in roles.values():
        results["held_out_runs"] = record_held_out("realmem", results)
    emit(args, "realmem", results, markdown(results, ABOUT_REALMEM))


if __name__ == "__main__":
    main()
