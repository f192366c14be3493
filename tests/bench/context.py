"""Context benchmark: `build_context` latency by memory size, and what `hilo serve` adds
to the time to first token.

1. `build_context` p50/p99 on memories of 10^4, 10^5 and 10^6 events, with facts and
   context cards at half that each (so 10^6 events carry 5x10^5 facts, 5x10^5 cards and
   a vector for every one), bulk-loaded in one transaction through the real schema
   (FTS5 triggers fire), the full-text indexes' segments then merged as the six-hourly
   consolidation leaves them (the turns timed add segments again). The text is Zipf-distributed words with English stop-words
   mixed in, so common words match many rows as in real conversation. Measured without
   vectors (keywords, importance, recency) and with 384-d vectors stored for every fact
   and card and a precomputed query vector (the query's embedding is not timed). The
   vectors are synthetic unit vectors: fine for timing, not for recall (see
   tests.bench.vector_index for recall on real vectors). As the server runs it: one
   BLAS thread, the question's model the stored vectors' model, and an event committed
   by another connection before every turn (so the index's change check runs each
   time). The approximate indexes are built once (as `hilo rebuild` does) before the
   clock starts; "cold" is the first call of a process that reads them from disk. Also:
   how much of plain bm25()'s top 10 facts the bounded full-text stream keeps.
2. Time to first token of `POST /api/chat`, straight to the fake model server and
   through `hilo serve` (a subprocess), interleaved in one run, on a fresh memory, on
   the 10^5 one and (fewer turns) on the 10^6 one; the fake server embeds with the
   stored vectors' model and dimension, so the vector stream searches; and the peak RSS
   of `hilo serve` under that load (VmHWM from /proc). The fake embeds at once; a model
   server takes milliseconds to tens of them to embed a question, which a turn waits
   for, so the 10^5 memory is timed again with embedding taking EMBED_MS (a sleep in
   the fake: what it leaves out is the embedding's own CPU, which a local server takes
   from the same cores).

    python -m tests.bench.context [--quick] [--json] [--no-vectors] [--sizes 10000,100000]
                                  [--keep DIR]

`--keep DIR` (e.g. `.bench/context`, ignored by git) keeps the memories it builds in DIR
and reuses them on the next run (the
10^6 one takes minutes to build); each run adds its few hundred turns to them.

Targets: p50 <= 5 ms at 10^5; p99 <= 25 ms at 10^6; p50(10^6) / p50(10^4) <= 4;
TTFT overhead <= 15 ms at p50; with a vector for each of 10^6 facts and cards: p50 <=
10 ms, p99 <= 25 ms, cold first call <= 1 s, `hilo serve` RSS <= 1 GiB. `--quick`
stops at 10^5.
"""

from __future__ import annotations

import os

# As `hilo` runs (app/cli): one BLAS thread, set before numpy loads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np

from app.config import Config, load_config
from app.datadir import DataDir
from app.db import FTS_TABLES, Durability, connect, connect_readonly, merge_fts_segments
from app.events import session_events
from app.learn.consolidate import FTS_MERGE_PAGES
from app.log import configure_logging
from app.model.token_count import TokenCounter
from app.recall.bm25 import FTS_SQL
from app.recall.query import make_query
from app.recall.state import Recall
from app.recall.streams import bm25_stream
from app.recall.vectors import Owner, encode_vector, rebuild_indexes, store_vectors
from app.turn.context import ContextRequest, build_context, read_bootstrap
from tests.bench.report import REPO_ROOT, emit, median, parser, peak_rss_mib, percentile

USER = "bench"
SESSION_EVENTS = 20  # events per session
COMPACTED_PER_SESSION = 12  # the oldest events of each session, folded into cards
# The configured embedder's model: the fake model server embeds questions with it too.
VECTOR_MODEL, VECTOR_DIM = "nomic-embed-text", 384
FACTS_AND_CARDS_SHARE = 0.5  # of the events, each
EMBED_MS = 10.0  # a model server's time to embed a question, in the second TTFT run at 10^5
SIZES_FULL = (10_000, 100_000, 1_000_000)
SIZES_QUICK = (10_000, 100_000)
TARGETS = {"p50_ms_at_1e5": 5.0, "p99_ms_at_1e6": 25.0, "p50_growth_1e4_to_1e6": 4.0,
           "ttft_overhead_p50_ms": 15.0, "vectors_p50_ms_at_1e6": 10.0,
           "vectors_p99_ms_at_1e6": 25.0, "vectors_first_ms_at_1e6": 1000.0,
           "serve_rss_mib_at_1e6": 1024.0}

# -- text ------------------------------------------------------------------------------------

STOP = """the a an and or but of to in on at for with from by is are was were be been it this
that these those i you he she we they me my your our their what which who when where how
not no do does did have has had will would can could should just so if then than there here
about into over after before as up out""".split()

# Content words in rough order of frequency: the head matches many rows, as it would.
COMMON = """time work day people way thing year project code file data server database
problem question idea plan meeting team email phone home family friend car house money
week month today tomorrow morning night weekend trip book movie music game food coffee
dinner lunch breakfast doctor health sleep run gym bike walk city street office school
kids wife husband mother father brother sister dog cat garden kitchen water weather rain
python docker linux backup deploy release bug test build error log config model memory
user account password key network wifi laptop screen keyboard window update version branch
commit merge review issue ticket client customer price budget invoice order delivery
flight hotel train ticket passport visa holiday beach mountain river lake park museum
recipe bread pasta rice chicken fish salad soup cake wine beer tea milk sugar salt pepper
garden flowers tree grass paint wall door table chair bed sofa lamp light power battery
charger cable printer router disk storage cloud bucket query index schema table column
migration cluster node container image volume port host domain certificate token secret
script function class method variable loop string number list dict tuple exception
report chart slide deck talk conference paper article blog post podcast video photo camera
guitar piano song concert ticket festival party birthday wedding gift card letter
appointment dentist pharmacy medicine vitamin allergy knee back headache cold flu fever
salary tax bank loan mortgage rent insurance bill payment refund receipt discount sale
spanish english french german lesson course exam grade homework teacher student class
madrid lisbon paris berlin london york tokyo barcelona valencia sevilla porto rome""".split()


def _tail(count: int, rng: np.random.Generator) -> list[str]:
    """Rare words: names, identifiers, versions, numbers (the long tail of real text)."""
    syllables = ["ka", "lo", "mi", "ra", "tu", "ne", "so", "vi", "da", "pe", "ri", "go",
                 "ba", "ze", "fu", "xo", "lan", "mer", "tor", "sil"]
    picks = rng.integers(len(syllables), size=(count, 3))
    shapes = rng.integers(5, size=count)
    words = []
    for i, (row, shape) in enumerate(zip(picks, shapes, strict=True)):
        stem = "".join(syllables[j] for j in row)
        words.append([stem, f"{stem}{i % 97}", f"v{i % 13}.{i % 29}", f"{stem}-{i}",
                      f"{1000 + i}"][shape])
    return words


class TextMaker:
    """Sentences of Zipf-distributed words with ~40 % stop-words, fast in bulk."""

    def __init__(self, seed: int = 7, tail: int = 30_000) -> None:
        self.rng = np.random.default_rng(seed)
        vocab = COMMON + _tail(tail, self.rng)
        self.vocab = np.array(vocab, dtype=object)
        ranks = np.arange(1, len(vocab) + 1)
        weights = 1.0 / (ranks + 2.7) ** 1.07  # Zipf–Mandelbrot, as natural text
        self.p = weights / weights.sum()
        self.stop = np.array(STOP, dtype=object)

    def sentences(self, count: int, low: int, high: int) -> list[str]:
        lengths = self.rng.integers(low, high + 1, size=count)
        total = int(lengths.sum())
        words = self.vocab[self.rng.choice(len(self.vocab), size=total, p=self.p)]
        stops = self.rng.random(total) < 0.4
        words[stops] = self.stop[self.rng.integers(len(self.stop), size=int(stops.sum()))]
        ends = np.cumsum(lengths)
        return [" ".join(words[end - n:end]) for n, end in zip(lengths, ends, strict=True)]


def _times(count: int, start: str = "2024-01-01T00:00:00", days: int = 700) -> list[str]:
    base = np.datetime64(start, "us")
    offsets = np.linspace(0, days * 86_400 * 1_000_000, num=count, dtype=np.int64)
    stamps = np.datetime_as_string(base + offsets.astype("timedelta64[us]"), unit="us")
    return [f"{s}Z" for s in stamps]


# -- the memory ----------------------------------------------------------------------------


@dataclass
class Memory:
    config: Config
    events: int
    facts: int
    cards: int
    load_seconds: float
    db_mib: float
    index_seconds: float = 0.0  # building the approximate indexes, once


def kept_memory(data_dir: Path, events: int, *, vectors: bool, text: TextMaker) -> Memory:
    """The memory built by an earlier run with --keep, or a new one kept for the next."""
    described = data_dir / "bench-memory.json"
    if described.exists():
        config = bench_config(data_dir)
        DataDir.of(config).init()  # migrations added since it was built
        con = connect(DataDir(data_dir).memory_db, Durability.NORMAL)
        merge_as_consolidation_does(con)  # the turns earlier runs added
        con.close()
        return Memory(config, **json.loads(described.read_text()))
    memory = load_memory(data_dir, events, vectors=vectors, text=text)
    described.write_text(json.dumps({
        "events": memory.events, "facts": memory.facts, "cards": memory.cards,
        "load_seconds": memory.load_seconds, "db_mib": memory.db_mib,
        "index_seconds": memory.index_seconds}))
    return memory


def bench_config(data_dir: Path) -> Config:
    return load_config(path=REPO_ROOT / "config.toml", env={}, data_dir=data_dir)


def load_memory(data_dir: Path, events: int, *, vectors: bool, text: TextMaker,
                chunk: int = 50_000) -> Memory:
    """A migrated data directory holding `events` events and 10 % as many facts and cards."""
    config = bench_config(data_dir)
    DataDir.of(config).init()
    started = time.perf_counter()
    con = connect(DataDir(data_dir).memory_db, Durability.NORMAL)
    con.execute("PRAGMA synchronous = OFF")  # a fixture: durability is not what is measured
    con.execute("PRAGMA cache_size = -262144")
    sessions = -(-events // SESSION_EVENTS)
    n_cards = n_facts = max(1, int(events * FACTS_AND_CARDS_SHARE))
    event_times = _times(events)
    rng = text.rng
    con.execute("BEGIN")
    con.executemany(
        "INSERT INTO sessions (user_id, id, started_at, last_event_at, ended_at) "
        "VALUES (?, ?, ?, ?, ?)",
        [(USER, f"s{s}", event_times[s * SESSION_EVENTS],
          event_times[min(events, (s + 1) * SESSION_EVENTS) - 1],
          event_times[min(events, (s + 1) * SESSION_EVENTS) - 1] if s < sessions - 1 else None)
         for s in range(sessions)])

    # Cards first (events point at them): each covers a slice of a session's compacted events.
    per_session = max(1, n_cards // sessions)
    card_times = _times(n_cards)
    summaries = text.sentences(n_cards, 20, 50)
    keywords = text.sentences(n_cards, 3, 6)
    con.executemany(
        "INSERT INTO context_cards (id, user_id, session_id, summary, keywords, first_event_id, "
        "last_event_id, event_count, importance, created_at, updated_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(c + 1, USER, f"s{min(sessions - 1, c // per_session)}", summaries[c],
          keywords[c].replace(" ", ", "), c * 4 + 1, c * 4 + 4, 4,
          0.85 if c % 25 == 0 else 0.5, card_times[c], card_times[c]) for c in range(n_cards)])

    for start in range(0, events, chunk):
        count = min(chunk, events - start)
        user_texts = text.sentences(count, 6, 30)
        reply_texts = text.sentences(count, 15, 60)
        rows = []
        for i in range(count):
            n = start + i
            position = n % SESSION_EVENTS
            role = "user" if position % 2 == 0 else "assistant"
            compacted = position < COMPACTED_PER_SESSION and n < events - SESSION_EVENTS
            rows.append((f"bench-{n}", USER, f"s{n // SESSION_EVENTS}", role,
                         user_texts[i] if role == "user" else reply_texts[i], event_times[n],
                         0.9 if n % 50 == 0 else 0.5, int(compacted),
                         (n // SESSION_EVENTS) * per_session + 1 if compacted and
                         (n // SESSION_EVENTS) * per_session < n_cards else None))
        con.executemany(
            "INSERT INTO events (uuid, user_id, session_id, role, content, created_at, importance, "
            "compacted, card_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)

    fact_times = _times(n_facts)
    keys = text.sentences(n_facts, 1, 3)
    values = text.sentences(n_facts, 4, 15)
    categories = ("fact", "decision", "solution", "preference", "conversation")
    importance = rng.uniform(0.3, 1.0, size=n_facts)
    con.executemany(
        "INSERT INTO facts (user_id, category, key, value, source, created_at, updated_at, "
        "importance) VALUES (?, ?, ?, ?, 'agent', ?, ?, ?)",
        [(USER, categories[f % 5], f"{keys[f]} {f}", values[f], fact_times[f], fact_times[f],
          float(importance[f])) for f in range(n_facts)])
    con.executemany(
        "INSERT INTO profile (user_id, key, value, source, created_at, updated_at) "
        "VALUES (?, ?, ?, 'agent', ?, ?)",
        [(USER, key, value, event_times[0], event_times[0]) for key, value in (
            ("name", "Ana"), ("city", "Madrid"), ("job", "backend developer"),
            ("languages", "Spanish, English"), ("editor", "vim"), ("pet", "a cat called Miso"))])
    con.executemany(
        "INSERT INTO diary (user_id, session_id, entry, created_at) VALUES (?, ?, ?, ?)",
        [(USER, f"s{s}", sentence, event_times[min(events - 1, (s + 1) * SESSION_EVENTS - 1)])
         for s, sentence in zip(range(0, sessions - 1, 10), text.sentences(sessions, 10, 25), strict=False)])
    if vectors:
        for kind, count in (("fact", n_facts), ("card", n_cards)):
            for start in range(0, count, chunk):
                block = rng.standard_normal((min(chunk, count - start), VECTOR_DIM),
                                            dtype=np.float32)
                con.executemany(
                    "INSERT INTO embeddings (user_id, owner_kind, owner_id, model, dim, vector, "
                    "created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [(USER, kind, start + i + 1, VECTOR_MODEL, VECTOR_DIM, encode_vector(v),
                      event_times[-1]) for i, v in enumerate(block)])
    con.execute("COMMIT")
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    seconds = time.perf_counter() - started
    indexed = time.perf_counter()
    if vectors:  # once, as `hilo rebuild` or the first start does; then read from disk
        rebuild_indexes(con, config.embedder.ann_threshold)
    index_seconds = time.perf_counter() - indexed
    merge_as_consolidation_does(con)
    con.close()
    size = DataDir(data_dir).memory_db.stat().st_size / 2**20
    return Memory(config, events, n_facts, n_cards, seconds, size, index_seconds)


def merge_as_consolidation_does(con) -> None:
    """The full-text indexes as the consolidation job leaves them, every six hours
    (app/learn/consolidate.py): their segments merged."""
    for table in FTS_TABLES:
        while merge_fts_segments(con, table, FTS_MERGE_PAGES):
            pass


# -- build_context latency -------------------------------------------------------------------

FIXED_QUESTIONS = [
    "what did we decide about the database migration last week?",
    "remind me which hotel we booked in Lisbon",
    "can you help me fix the docker build error again",
    "¿qué le regalo a mi hermana por su cumpleaños?",
    "what is my wifi password",
    "ok thanks",
]


def questions(text: TextMaker, count: int) -> list[str]:
    return FIXED_QUESTIONS + text.sentences(count - len(FIXED_QUESTIONS), 5, 25)


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def evict_from_page_cache(paths: Iterable[Path]) -> bool:
    """Drop these files' pages from the page cache (Linux; False where it cannot)."""
    if not hasattr(os, "posix_fadvise"):
        return False
    for path in paths:
        descriptor = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(descriptor)
    return True


def time_build_context(memory: Memory, asked: list[str], recall: Recall, *,
                       vectors: bool) -> dict:
    config = memory.config
    index = recall.vectors
    index.clear()  # a process that just started
    index.ann_threshold = config.embedder.ann_threshold
    rss_before = rss_mib()
    con = connect_readonly(DataDir.of(config).memory_db)
    # The server stores the user's message (another connection, committed) before it
    # builds the context: every turn starts after a commit.
    writer = connect(DataDir.of(config).memory_db, Durability.FULL)
    counter = TokenCounter()
    bootstrap = read_bootstrap(DataDir.of(config).bootstrap)
    sessions = -(-memory.events // SESSION_EVENTS)
    windows = [session_events(con, USER, f"s{s}", limit=50, include_compacted=False)
               for s in range(max(0, sessions - 8), sessions)]
    rng = np.random.default_rng(11)

    def once(i: int, text: str) -> float:
        # The query's embedding is made before the clock starts; reading the question
        # against the memory (make_query with the connection), as a turn does, is timed.
        vector = rng.standard_normal(VECTOR_DIM, dtype=np.float32) if vectors else None
        writer.execute(
            "INSERT INTO events (uuid, user_id, session_id, role, content, created_at, "
            "importance) VALUES (?, ?, ?, 'user', ?, '2026-01-01T00:00:00', 0.5)",
            (f"turn-{time.perf_counter_ns()}", USER, f"s{sessions - 1}", text))
        started = time.perf_counter()
        query = make_query(USER, text, recall=recall, con=con)
        if vector is not None:
            query.vector, query.model = vector, VECTOR_MODEL
        build_context(con, config, counter, ContextRequest(
            USER, text, session_id=f"s{sessions - 1 - i % 8}", window=windows[i % len(windows)],
            bootstrap=bootstrap, query=query))
        return (time.perf_counter() - started) * 1000

    first = once(0, asked[0])  # cold: page cache and reading the vector indexes
    rss_loaded = rss_mib()
    for i, text in enumerate(asked[:20]):
        once(i, text)
    samples = [once(i, text) for i, text in enumerate(asked)]
    slowest = sorted(zip(samples, asked, strict=True), reverse=True)[:3]
    warming = {}
    if vectors:
        # As after the worker re-embeds a fact (its text changed): the turn after it drops
        # the replaced vector from the graph's hits.
        replaced = []
        for i, (fact_id,) in enumerate(con.execute(
                "SELECT owner_id FROM embeddings WHERE user_id = ? AND model = ? "
                "AND owner_kind = 'fact' LIMIT 10", (USER, VECTOR_MODEL)).fetchall()):
            fresh = rng.standard_normal((1, VECTOR_DIM), dtype=np.float32)
            store_vectors(writer, [Owner("fact", fact_id, USER, "")], VECTOR_MODEL, fresh)
            replaced.append(once(i, asked[i]))
        warming["after_replace_p50_ms"] = median(replaced)
        warming["after_replace_max_ms"] = max(replaced)
        # As after a reboot: the index files' pages dropped from the page cache first.
        index.clear()
        if evict_from_page_cache(DataDir.of(config).vector_indexes.glob("*")):
            warming["first_ms_from_disk"] = once(3, asked[3])
        # As `hilo serve` starts: the indexes load in the background meanwhile.
        index.clear()
        started = time.perf_counter()
        loader = index.warm(DataDir.of(config).memory_db, VECTOR_MODEL)
        warming["first_ms_while_warming"] = once(1, asked[1])
        loader.join()
        warming["warm_seconds"] = time.perf_counter() - started
        warming["first_ms_after_warm"] = once(2, asked[2])
    con.close()
    writer.close()
    index.clear()
    return {"p50_ms": median(samples), "p99_ms": percentile(samples, 99),
            "max_ms": max(samples), "first_ms": first, "samples": len(samples),
            "index_rss_mib": rss_loaded - rss_before, "rss_mib": rss_loaded, **warming,
            "slowest": [{"ms": round(ms, 2), "text": text} for ms, text in slowest]}


def explain_fts(memory: Memory, text: str, recall: Recall) -> dict[str, list[str]]:
    """EXPLAIN QUERY PLAN of the full-text stream's joins, for the report."""
    con = connect_readonly(DataDir.of(memory.config).memory_db)
    query = make_query(USER, text, recall=recall)
    plans = {kind: [row[3] for row in con.execute("EXPLAIN QUERY PLAN " + sql,
                                                  (query.match, USER, 50))]
             for kind, sql in FTS_SQL.items()}
    con.close()
    return plans


def bm25_agreement(memory: Memory, asked: list[str], recall: Recall, k: int = 10) -> float:
    """Mean share of plain bm25()'s top k facts that the bounded full-text stream also
    ranks in its top k (app.recall.bm25: BM25_ROW_BUDGET)."""
    con = connect_readonly(DataDir.of(memory.config).memory_db)
    shares = []
    for text in asked:
        query = make_query(USER, text, recall=recall)
        if query.match is None:
            continue
        plain = [row[0] for row in con.execute(FTS_SQL["fact"], (query.match, USER, k))]
        if plain:
            bounded = bm25_stream(con, query, "fact", 50)[:k]
            shares.append(len(set(plain) & set(bounded)) / len(plain))
    con.close()
    return sum(shares) / len(shares) if shares else float("nan")


# Partial indexes for the importance stream (app.recall.streams writes its 0.8 threshold into
# the SQL so SQLite can use them). Not in the schema yet: measured here as a proposal.
# -- time to first token through hilo serve ----------------------------------------------------


@contextmanager
def process(args: list[str], env: dict[str, str] | None = None) -> Iterator[subprocess.Popen]:
    proc = subprocess.Popen(args, cwd=REPO_ROOT, env={**os.environ, **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until_up(url: str, proc: subprocess.Popen, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{url} exited with status {proc.returncode} before answering")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url} did not answer within {seconds} s")


def first_token_ms(client: httpx.Client, url: str, body: dict, headers: dict) -> float:
    started = time.perf_counter()
    elapsed = None
    with client.stream("POST", f"{url}/api/chat", json=body, headers=headers) as response:
        for line in response.iter_lines():  # read it all: the turn completes
            if elapsed is None and line and json.loads(line).get("message", {}).get("content"):
                elapsed = (time.perf_counter() - started) * 1000
    if elapsed is None:
        raise RuntimeError(f"no content from {url}: HTTP {response.status_code}")
    return elapsed


def vm_hwm_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def time_to_first_token(memory: Memory, turns: int, text: TextMaker,
                        embed_ms: float = 0.0) -> dict:
    """TTFT straight to the fake model server and through `hilo serve` on this memory,
    the fake taking `embed_ms` to embed."""
    fake_port, hilo_port = free_port(), free_port()
    with process([sys.executable, "-m", "tests.fake_ollama", "--port", str(fake_port),
                  "--embedding-dim", str(VECTOR_DIM), "--embed-ms", str(embed_ms)]) as fake:
        fake_url = fake.stdout.readline().strip()
        env = {"HILO_LLM_URL": fake_url, "HILO_LOGGING_LEVEL": "warning"}
        with process([sys.executable, "-m", "app.cli", "serve", "--data-dir",
                      str(memory.config.data_dir), "--port", str(hilo_port)], env) as hilo:
            hilo_url = f"http://127.0.0.1:{hilo_port}"
            wait_until_up(hilo_url, hilo)
            direct, through = [], []
            history: list[dict] = []
            asked = text.sentences(turns + 10, 5, 25)
            run = time.strftime("%Y%m%d%H%M%S")  # a kept memory's earlier runs hold their own
            with httpx.Client(timeout=60) as client:
                for i, question in enumerate(asked):
                    if i % 10 == 0:
                        history = []  # a new conversation every 10 turns
                    history.append({"role": "user", "content": question})
                    body = {"model": "gemma3:4b", "messages": history}
                    headers = {"X-Hilo-User": USER, "X-Hilo-Session": f"ttft-{run}-{i // 10}"}
                    # Interleaved, alternating who goes first, so drift hits both alike.
                    order = [(fake_url, direct), (hilo_url, through)]
                    for url, samples in order if i % 2 else order[::-1]:
                        ms = first_token_ms(client, url, body, headers)
                        if i >= 10:  # the first conversation warms both up
                            samples.append(ms)
                    history.append({"role": "assistant", "content": "ok: " + question[:60]})
            rss = vm_hwm_mib(hilo.pid)
    return {
        "turns": len(through),
        "direct_p50_ms": median(direct), "direct_p99_ms": percentile(direct, 99),
        "hilo_p50_ms": median(through), "hilo_p99_ms": percentile(through, 99),
        "overhead_p50_ms": median(through) - median(direct),
        "overhead_p99_ms": percentile(through, 99) - percentile(direct, 99),
        "hilo_serve_peak_rss_mib": rss,
        "memory_events": memory.events,
    }


# -- the run -------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--no-vectors", action="store_true", help="skip the runs with stored vectors")
    p.add_argument("--sizes", help="comma-separated event counts (default: 10^4, 10^5, 10^6)")
    p.add_argument("--keep", metavar="DIR", help="keep the memories in DIR and reuse them")
    args = p.parse_args(argv)
    configure_logging("warning")  # stdout carries the report (or the JSON) only
    sizes = SIZES_QUICK if args.quick else SIZES_FULL
    if args.sizes:
        sizes = tuple(int(size) for size in args.sizes.split(","))
    text = TextMaker()
    asked = questions(text, 150 if args.quick else 400)
    turns = 40 if args.quick else 200
    vectors = not args.no_vectors
    recall = Recall()  # the bench's, as a server's: its word counts outlive a run
    results: dict = {"sizes": {}, "ttft": {}, "ttft_embedding": {}, "targets": TARGETS}
    with tempfile.TemporaryDirectory(prefix="hilo-bench-context-") as tmp:
        kept = Path(args.keep) if args.keep else None
        fresh = bench_config(Path(tmp) / "fresh")
        DataDir.of(fresh).init()
        results["ttft"]["fresh"] = time_to_first_token(Memory(fresh, 0, 0, 0, 0, 0), turns, text)
        for size in sizes:
            name = f"m{size}" if vectors else f"m{size}-no-vectors"
            if kept is not None:
                memory = kept_memory(kept / name, size, vectors=vectors, text=text)
            else:
                memory = load_memory(Path(tmp) / name, size, vectors=vectors, text=text)
            entry = {"events": memory.events, "facts": memory.facts, "cards": memory.cards,
                     "load_seconds": memory.load_seconds, "db_mib": memory.db_mib,
                     "index_seconds": memory.index_seconds,
                     "fts_plans": explain_fts(memory, asked[0], recall),
                     "bm25_top10_agreement": bm25_agreement(memory, asked[:50], recall),
                     "keywords": time_build_context(memory, asked, recall, vectors=False)}
            if vectors:
                entry["with_vectors"] = time_build_context(memory, asked, recall, vectors=True)
            if size >= 100_000:
                results["ttft"][str(size)] = time_to_first_token(
                    memory, turns if size == 100_000 else min(turns, 60), text)
            if size == 100_000:
                results["ttft_embedding"][str(size)] = time_to_first_token(
                    memory, turns, text, embed_ms=EMBED_MS)
            results["sizes"][str(size)] = entry
            if kept is None:
                _remove(memory.config.data_dir)
    results["bench_peak_rss_mib"] = peak_rss_mib()
    results["verdict"] = verdict(results)
    emit(args, "context", results, markdown(results))
    return 0


def _remove(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def verdict(results: dict) -> dict:
    """Each target, on the schema as shipped."""
    sizes = results["sizes"]
    checks = {}
    for label, key in (("", "keywords"),):
        if "100000" in sizes:
            checks[f"p50 <= 5 ms at 10^5{label}"] = sizes["100000"][key]["p50_ms"] <= 5
        if "1000000" in sizes:
            checks[f"p99 <= 25 ms at 10^6{label}"] = sizes["1000000"][key]["p99_ms"] <= 25
        if "1000000" in sizes and "10000" in sizes:
            growth = sizes["1000000"][key]["p50_ms"] / sizes["10000"][key]["p50_ms"]
            checks[f"p50 10^6 / 10^4 <= 4{label}"] = growth <= 4
    vectors = sizes.get("1000000", {}).get("with_vectors")
    if vectors:
        checks["+ vectors p50 <= 10 ms at 10^6"] = vectors["p50_ms"] <= 10
        checks["+ vectors p99 <= 25 ms at 10^6"] = vectors["p99_ms"] <= 25
        checks["+ vectors cold first call <= 1 s at 10^6"] = vectors["first_ms"] <= 1000
        if "after_replace_max_ms" in vectors:
            checks["+ vectors a turn after a re-embedded fact <= 25 ms at 10^6"] = (
                vectors["after_replace_max_ms"] <= 25)
        if "first_ms_from_disk" in vectors:
            checks["+ vectors cold first call <= 1 s at 10^6, index files not cached"] = (
                vectors["first_ms_from_disk"] <= 1000)
    if "1000000" in results["ttft"]:
        checks["RSS of hilo serve <= 1 GiB at 10^6"] = (
            results["ttft"]["1000000"]["hilo_serve_peak_rss_mib"] <= 1024)
    for memory, ttft in results["ttft"].items():
        checks[f"TTFT overhead p50 <= 15 ms ({memory} memory)"] = ttft["overhead_p50_ms"] <= 15
    return checks


def _cell(entry: dict, key: str, stat: str) -> str:
    return f"{entry[key][stat]:.2f}" if key in entry else "–"


def markdown(results: dict) -> str:
    lines = ["### `build_context` latency (ms)", "",
             "One user; facts and cards at half the events each; Zipf-distributed words with "
             "English stop-words, so common words match many rows; the full-text indexes' "
             "segments merged as the consolidation job leaves them, and a new event committed "
             "by another connection before every call; one BLAS thread. *keywords*: BM25, "
             "importance and recency streams; *+ vectors*: also 384-d synthetic unit vectors "
             "stored for every fact and card (timing only), the query vector precomputed "
             "(embedding not timed); exact search up to `[embedder] ann_threshold` vectors "
             "per kind, HNSW above. *cold*: the first call of a fresh index (reading the "
             "persisted HNSW files, as the page cache holds them); *from disk*: the same "
             "with the index files' pages dropped from the page cache first (as after a "
             "reboot: bound by the disk); *while warming*: the first call while `warm()` loads "
             "them in the background, as `hilo serve` starts; *re-embedded*: p50 and the "
             "slowest of 10 calls each made right after a fact's vector was replaced (as "
             "the worker re-embeds a changed fact); *index RSS*: resident memory "
             "the loaded index added.", "",
             "| events | facts = cards | DB MiB | keywords p50 | p99 | + vectors p50 | p99 | "
             "cold ms | from disk ms | while warming ms | warm s | re-embedded p50 | max | "
             "index build s | index RSS MiB | BM25 top-10 agreement |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for e in results["sizes"].values():
        v = e.get("with_vectors", {})
        lines.append(
            f"| {e['events']:,} | {e['facts']:,} | {e['db_mib']:.0f} | "
            f"{_cell(e, 'keywords', 'p50_ms')} | {_cell(e, 'keywords', 'p99_ms')} | "
            f"{_cell(e, 'with_vectors', 'p50_ms')} | {_cell(e, 'with_vectors', 'p99_ms')} | "
            f"{_cell(e, 'with_vectors', 'first_ms')} | "
            f"{v.get('first_ms_from_disk', float('nan')):.2f} | "
            f"{v.get('first_ms_while_warming', float('nan')):.2f} | "
            f"{v.get('warm_seconds', float('nan')):.2f} | "
            f"{v.get('after_replace_p50_ms', float('nan')):.2f} | "
            f"{v.get('after_replace_max_ms', float('nan')):.2f} | {e.get('index_seconds', 0):.1f} | "
            f"{v.get('index_rss_mib', float('nan')):.0f} | "
            f"{e['bm25_top10_agreement']:.2f} |")
    largest = list(results["sizes"].values())[-1]
    lines += ["", f"Slowest questions at {largest['events']:,} events (keywords): "
              + "; ".join(f"{s['ms']} ms \"{s['text'][:50]}\""
                          for s in largest["keywords"]["slowest"])]
    lines += ["", "### Time to first token, `POST /api/chat` (fake model server)", "",
              "Interleaved in one run, streaming, the conversation resent each turn; "
              "through Hilo includes storing the message (synchronous=FULL), embedding the "
              "question (fake `/api/embed`, at once unless the row says otherwise: the "
              "turn's keyword reads run meanwhile) and building the context.", "",
              "| memory | turns | direct p50 | p99 | through `hilo serve` p50 | p99 | "
              "overhead p50 | peak RSS of `hilo serve` |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    runs = [("fresh" if memory == "fresh" else f"{int(memory):,} events", t)
            for memory, t in results["ttft"].items()]
    runs += [(f"{int(memory):,} events, embedding takes {EMBED_MS:g} ms", t)
             for memory, t in results["ttft_embedding"].items()]
    for name, t in runs:
        lines.append(f"| {name} | {t['turns']} | {t['direct_p50_ms']:.2f} | "
                     f"{t['direct_p99_ms']:.2f} | {t['hilo_p50_ms']:.2f} | "
                     f"{t['hilo_p99_ms']:.2f} | "
                     f"{t['overhead_p50_ms']:.2f} | {t['hilo_serve_peak_rss_mib']:.0f} MiB |")
    lines += ["", "### Targets", ""] + [f"- {'met' if ok else 'MISSED'}: {name}"
                                          for name, ok in results["verdict"].items()]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
