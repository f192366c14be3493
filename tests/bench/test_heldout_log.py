"""Every held-out run goes on the record (tests/bench/report.py: record_held_out)."""

from __future__ import annotations

import json

from tests.bench import report


def _results(recall: float) -> dict:
    context = {"overall": {"context recall": recall}, "found_not_told": 0.1}
    split = {"role": "held-out", "questions": 653,
             "contexts": {"context": context, "context, budget filled": context},
             "methods": {"fusion": {"overall": {"recall@2": 0.5, "recall@10": 0.8}}}}
    return {"splits": {"development": {"role": "development"}, "held out": split}}


def test_each_held_out_run_is_appended_and_counted(tmp_path, monkeypatch):
    log = tmp_path / "heldout_runs.jsonl"
    monkeypatch.setattr(report, "HELD_OUT_LOG", log)
    assert report.record_held_out("locomo", _results(0.7))["count"] == 1
    report.record_held_out("other", _results(0.1))
    second = report.record_held_out("locomo", _results(0.72))
    assert second["count"] == 2 and second["commit"]
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert [e["bench"] for e in entries] == ["locomo", "other", "locomo"]
    held = entries[-1]["splits"]["held out"]
    assert held["context recall"] == 0.72 and held["context recall, budget filled"] == 0.72
    assert list(entries[-1]["splits"]) == ["held out"]  # development figures stay off it
