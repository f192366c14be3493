"""Redaction benchmark: what recognising secrets costs each stored message.

Every message Hilo stores goes through `redact_secrets` first, so this measures it, in µs
per event of CPU time (so that other work on the machine counts for little; best of five
passes, the redactor's memory of recent texts emptied before each pass so every text is
scanned):
  chat      every turn of LoCoMo's development conversations, one event each;
  corpus    every text of the secrets corpus and of its look-alikes;
  1 MB      the LoCoMo turns joined into one text of 1 MB (a pasted log), µs per MB.

    python -m tests.bench.sanitize [--data PATH]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from app import sanitize
from tests.bench.locomo import DEFAULT_DATA, DEVELOPMENT, load
from tests.bench.report import REPO_ROOT
from tests.reliability.secrets_corpus import benign, secrets

PASSES = 5
MEGABYTE = 1_000_000


def best_seconds(texts: list[str]) -> float:
    """The fastest of PASSES passes redacting every text once."""
    best = float("inf")
    for _ in range(PASSES):
        sanitize._remembered_findings.cache_clear()  # every text scanned, none recalled
        began = time.process_time()
        for text in texts:
            sanitize.redact_secrets(text)
        best = min(best, time.process_time() - began)
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", type=Path, default=DEFAULT_DATA,
                   help="locomo10.json (relative paths are from the repository root)")
    args = p.parse_args()
    path = args.data if args.data.is_absolute() else (REPO_ROOT / args.data).resolve()
    turns = [turn.text for conv in load(path, DEVELOPMENT) for turn in conv.turns]
    corpus = [p.text for p in secrets()] + list(benign().values())
    joined = "\n".join(turns)
    megabyte = (joined * (MEGABYTE // len(joined) + 1))[:MEGABYTE]
    for name, texts in (("chat", turns), ("corpus", corpus)):
        seconds = best_seconds(texts)
        print(f"{name:8} {len(texts):6} events  {seconds / len(texts) * 1e6:8.1f} µs/event")
    print(f"{'1 MB':8} {1:6} text    {best_seconds([megabyte]) * 1e6:8.0f} µs/MB")


if __name__ == "__main__":
    main()
