"""Export → import → export of a LoCoMo-sized memory, in both formats: records and seconds.

The ten LoCoMo conversations become one user's memory, stored through Hilo's own writes:
every turn an event (one Hilo session per LoCoMo session), each session's summary its
diary entry and a card over its first ten turns, each observation a fact (the i-th
observation of a speaker in a session restates the i-th of the last session, so facts
gather history; one in fifty is forgotten), the user's name in the profile, a few tasks
in their own zones and MEMORY.md. Each format is exported, imported into an empty data
directory and exported again; the two exports must hold the same records.

    python -m tests.bench.transfer [--data PATH]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

from app.config import load_config
from app.datadir import DataDir
from app.db import Durability
from app.events import insert_event, link_to_card, prepare_event
from app.memory import NewCard, add_card, add_diary_entry, set_profile, upsert_fact
from app.memory.forget import forget_fact
from app.ops.transfer import export_jsonl, export_markdown, import_path
from app.tasks.store import add_task
from app.timeutil import to_rfc3339
from app.writer import Writer
from tests.bench.locomo import DEFAULT_DATA, load
from tests.conftest import REPO_ROOT
from tests.ops.test_transfer_roundtrip import NOW, canonical, exported_records

USER = "default"


def build(root: Path, data: Path) -> None:
    config = load_config(path=REPO_ROOT / "config.toml", env={}, data_dir=root)
    DataDir.of(config).init()
    raw = {c["sample_id"]: c for c in json.loads(data.read_text(encoding="utf-8"))}
    with Writer(DataDir.of(config).memory_db, Durability.FULL) as writer:
        for conv in load(data, tuple(raw)):
            sessions: dict[int, list[int]] = {}
            for turn in conv.turns:
                event = prepare_event(config, USER, f"{conv.sample_id} {turn.session}",
                                      "user" if turn.speaker == conv.user else "assistant",
                                      turn.text, created_at=to_rfc3339(turn.when))
                stored = writer.submit(lambda con, e=event: insert_event(con, e))
                sessions.setdefault(turn.session, []).append(stored.id)
            writer.submit(lambda con, c=conv, s=sessions: _derive(con, c, s, raw[c.sample_id]))
        for zone in ("America/New_York", "Europe/Madrid", None):
            add_task(writer, config, "every weekday at 9", f"Summarise yesterday ({zone}).",
                     now=NOW, timezone_name=zone, source="cli")
    DataDir.of(config).bootstrap.write_text("# About me\nAnswer briefly.\n", encoding="utf-8")


def _derive(con, conv, sessions: dict[int, list[int]], raw: dict) -> None:
    set_profile(con, USER, f"name in {conv.sample_id}", conv.user, source="user", worker="user")
    observed = 0
    for n, ids in sessions.items():
        summary = raw["session_summary"].get(f"session_{n}_summary", "").strip()
        if not summary:
            continue
        ended = conv.turns[0].when.replace(microsecond=0) + timedelta(days=n)
        add_diary_entry(con, USER, f"{conv.sample_id} {n}", summary, is_extractive=False,
                        worker="diary", created_at=to_rfc3339(ended))
        card_id = add_card(con, USER, NewCard(f"{conv.sample_id} {n}", summary[:400].strip(),
                                              "locomo", ids[0], ids[:10][-1], len(ids[:10]),
                                              created_at=to_rfc3339(ended)), worker="compact")
        link_to_card(con, USER, ids[:10], card_id)
        for speaker, items in raw["observation"].get(f"session_{n}_observation", {}).items():
            for i, item in enumerate(items):
                text = item[0] if isinstance(item, list) else str(item)
                written = upsert_fact(con, USER, "fact", f"{conv.sample_id} {speaker} {i}",
                                      text, source="agent", worker="distill")
                observed += 1
                if observed % 50 == 0 and written.fact_id is not None:
                    forget_fact(con, USER, written.fact_id)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        began = time.perf_counter()
        build(tmp / "home", args.data)
        print(f"built the memory in {time.perf_counter() - began:.1f} s")
        home = load_config(path=REPO_ROOT / "config.toml", env={}, data_dir=tmp / "home")
        print("| format | records | export s | import s | export again s | identical |")
        print("|---|---|---|---|---|---|")
        for fmt, export in (("jsonl", export_jsonl), ("md", export_markdown)):
            there = load_config(path=REPO_ROOT / "config.toml", env={},
                                data_dir=tmp / f"there-{fmt}")
            DataDir.of(there).init()
            first, second = (tmp / f"{name}-{fmt}{'.jsonl' if fmt == 'jsonl' else ''}"
                             for name in ("first", "second"))
            times = []
            for step in (lambda: export(home, USER, first),  # noqa: B023 — called at once
                         lambda: import_path(there, first, USER, now=NOW),  # noqa: B023 — called at once
                         lambda: export(there, USER, second)):  # noqa: B023 — called at once
                began = time.perf_counter()
                result = step()
                times.append(time.perf_counter() - began)
                if hasattr(result, "problems"):
                    assert not result.problems, result.problems[:3]
            records_in, records_out = exported_records(first), exported_records(second)
            same = canonical(records_in) == canonical(records_out)
            print(f"| {fmt} | {len(records_in)} in, {len(records_out)} out | {times[0]:.2f} | "
                  f"{times[1]:.2f} | {times[2]:.2f} | {'yes' if same else 'NO'} |")
        kinds = Counter(record["type"] for record in records_in)
        print("records: " + ", ".join(f"{n} {kind}" for kind, n in kinds.items()))


if __name__ == "__main__":
    main()
