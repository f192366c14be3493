"""Forget benchmark: what it costs that a forgotten value leaves the disk (issue 40).

On one memory of N conversation events (each with its full-text row), measured in the
same run, the two settings alternated:
  (a) writing: event appends through the group-commit writer, with every connection's
      PRAGMA secure_delete and the FTS5 indexes' 'secure-delete' on (Hilo's setting) and
      off (SQLite's defaults);
  (b) forgetting: `forget --with-sources` of a fact learned from one message, each
      setting; with them on, the write-ahead log checkpointed and truncated too
      (app/memory/forget.py), and the bytes of the value looked for in the files.

    python -m tests.bench.forget [--quick] [--json]
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from app.config import load_config
from app.datadir import DataDir
from app.db import Durability, checkpoint_wal
from app.events import append_events
from app.memory import store_fact
from app.memory.forget import forget, forget_fact
from app.writer import Writer
from tests.bench.report import emit, parser
from tests.conftest import REPO_ROOT

FTS_TABLES = ("events_fts", "cards_fts", "facts_fts", "event_labels_fts")
SAID = ("I moved the staging database to the new host and set the backup window to "
        "02:00 UTC; the nightly job now uploads to the bucket and keeps 14 days.")


def _setting(writer: Writer, on: bool) -> None:
    """Hilo's setting (on) or SQLite's defaults (off), on the writer's connection."""
    def apply(con) -> None:
        con.execute(f"PRAGMA secure_delete = {'ON' if on else 'OFF'}")
        for table in FTS_TABLES:
            con.execute(f"INSERT INTO {table} ({table}, rank) VALUES ('secure-delete', {int(on)})")
    writer.submit(apply)


def _append(writer: Writer, config, count: int, session: str) -> float:
    """Seconds to append `count` events, 50 a commit (a client's history at a time)."""
    started = time.perf_counter()
    for start in range(0, count, 50):
        append_events(writer, config, "ana", session,
                      [("user", f"{SAID} ({n})", {"origin": "typed"})
                       for n in range(start, min(count, start + 50))])
    return time.perf_counter() - started


def _forget_once(writer: Writer, config, n: int, on: bool) -> tuple[float, bool]:
    """Seconds to forget, with its sources, a fact learned from a fresh message; and
    whether the value's bytes are in none of the database's files afterwards."""
    secret = f"zanzibar{n:06d}"
    [said, _] = append_events(writer, config, "ana", f"told-{n}", [
        ("user", f"My locker code is {secret}", {"origin": "typed"}),
        ("assistant", f"Noted: {secret}.", {"origin": "model"})])
    fact = writer.submit(lambda con: store_fact(
        con, "ana", "fact", f"locker {n}", secret, source="agent", worker="distill",
        source_event_id=said.id, from_outside=False))
    started = time.perf_counter()
    if on:
        forget(writer, "ana", fact.fact_id, with_sources=True)
    else:  # the same change, and nothing done about the disk
        writer.submit(lambda con: forget_fact(con, "ana", fact.fact_id, with_sources=True))
    seconds = time.perf_counter() - started
    checkpoint_wal(writer.path)  # as SQLite does in time: then read the files
    files = writer.path.parent.glob(writer.path.name + "*")
    return seconds, not any(secret.encode() in path.read_bytes() for path in files)


def main() -> None:
    args = parser(__doc__).parse_args()
    events, rounds, forgets = (5_000, 4, 10) if args.quick else (50_000, 10, 40)
    results: dict = {"events": events, "rounds": rounds, "forgets_per_setting": forgets}
    with tempfile.TemporaryDirectory() as tmp:
        config = load_config(path=REPO_ROOT / "config.toml", env={}, data_dir=Path(tmp))
        DataDir.of(config).init()
        with Writer.from_config(config, Durability.FULL) as writer:
            _append(writer, config, events, "history")  # the memory it all happens in
            rates: dict[bool, list[float]] = {True: [], False: []}
            for round_ in range(rounds):
                for on in ((True, False) if round_ % 2 == 0 else (False, True)):
                    _setting(writer, on)
                    rates[on].append(1000 / _append(writer, config, 1000, f"r{round_}-{on}"))
            timings: dict[bool, list[float]] = {True: [], False: []}
            clean: dict[bool, int] = {True: 0, False: 0}
            for n in range(forgets):
                for on in ((True, False) if n % 2 == 0 else (False, True)):
                    _setting(writer, on)
                    seconds, gone = _forget_once(writer, config, n * 2 + on, on)
                    timings[on].append(seconds)
                    clean[on] += gone
            _setting(writer, True)
    for on, name in ((True, "hilo"), (False, "sqlite_defaults")):
        results[name] = {
            "appends_per_second": round(statistics.median(rates[on])),
            "forget_ms_median": round(1000 * statistics.median(timings[on]), 1),
            "forget_ms_max": round(1000 * max(timings[on]), 1),
            "forgets_leaving_no_bytes": clean[on]}
    results["load_average"] = round(os.getloadavg()[0], 1)  # a shared machine says so
    hilo, plain = results["hilo"], results["sqlite_defaults"]
    results["append_ratio"] = round(hilo["appends_per_second"] / plain["appends_per_second"], 2)
    markdown = f"""A memory of {events:,} events; {rounds} rounds of 1,000 appends (50 a commit,
`synchronous=FULL`) and {forgets} forgets with their sources per setting, the settings
alternated in one run (load average {results['load_average']} at the end, on 2 cores).

| setting | appends/s (median) | forget, median ms | forget, max ms | forgets whose value left every file |
|---|---:|---:|---:|---:|
| Hilo: secure_delete, FTS5 secure-delete, WAL truncated | {hilo['appends_per_second']:,} | {hilo['forget_ms_median']} | {hilo['forget_ms_max']} | {hilo['forgets_leaving_no_bytes']} of {forgets} |
| SQLite's defaults | {plain['appends_per_second']:,} | {plain['forget_ms_median']} | {plain['forget_ms_max']} | {plain['forgets_leaving_no_bytes']} of {forgets} |

Appends with Hilo's setting ran at {results['append_ratio']}× the defaults' rate: what it
overwrites is what a delete frees, the full-text index's merged segments included. A forget costs
its checkpoint: the write-ahead log copied into the file and truncated, which is what
takes the value out of the `-wal` file.
"""
    emit(args, "forget", results, markdown)


if __name__ == "__main__":
    main()
