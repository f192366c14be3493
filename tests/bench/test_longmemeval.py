"""The LongMemEval bench's loader (tests/bench/longmemeval.py), on a history written in
the dataset's own format: halves by question id, evidence from `has_answer`, the
question asked at its date, abstention questions left out."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from tests.bench.longmemeval import half, load


def _item(question_id: str, question_type: str = "single-session-user",
          marked: bool = True) -> dict:
    return {
        "question_id": question_id, "question_type": question_type,
        "question": "What degree did I graduate with?", "answer": "Business Administration",
        "question_date": "2023/05/30 (Tue) 23:40",
        "haystack_session_ids": ["s1", "s2"],
        "haystack_dates": ["2023/05/20 (Sat) 02:21", "2023/05/21 (Sun) 10:00"],
        "haystack_sessions": [
            [{"role": "user", "content": "Help me plan a pantry."},
             {"role": "assistant", "content": "Sure: shelves first."}],
            [{"role": "user", "content": "I graduated with a degree in Business "
                                         "Administration.", "has_answer": marked},
             {"role": "assistant", "content": "Congratulations!", "has_answer": False}],
        ],
    }


def _ids_of(role: str, count: int) -> list[str]:
    return [q for q in (f"q{i}" for i in range(200)) if half(q) == role][:count]


def test_each_question_is_a_user_whose_marked_turns_are_its_evidence(tmp_path):
    wanted = _ids_of("development", 2)
    path = tmp_path / "longmemeval.json"
    path.write_text(json.dumps([_item(q) for q in wanted]))
    loaded = load(path, "development", 0)
    assert sorted(c.sample_id for c in loaded) == sorted(wanted)
    conv = loaded[0]
    assert [t.speaker for t in conv.turns] == ["user", "assistant", "user", "assistant"]
    assert conv.questions[0].evidence == {"D2:1"} and conv.user_name is None
    assert conv.asked_at == datetime(2023, 5, 30, 23, 40, tzinfo=UTC)
    assert conv.turns[2].when == datetime(2023, 5, 21, 10, 0, 1, tzinfo=UTC)


def test_the_halves_never_share_a_question_and_abstentions_are_left_out(tmp_path):
    ids = _ids_of("development", 3) + _ids_of("held-out", 3)
    items = [_item(q) for q in ids] + [_item(ids[0] + "_abs"), _item("q999", marked=False)]
    path = tmp_path / "longmemeval.json"
    path.write_text(json.dumps(items))
    development = {c.sample_id for c in load(path, "development", 0)}
    held_out = {c.sample_id for c in load(path, "held-out", 0)}
    assert development == set(ids[:3]) and held_out == set(ids[3:])
    assert len(load(path, "held-out", 2)) == 2
