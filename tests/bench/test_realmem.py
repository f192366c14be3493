"""The RealMem bench's loader (tests/bench/realmem.py), on a user written in the
dataset's own format: evidence from the memory points the reply used, traced to the
turns they came from; the history ends before the question's session; halves by user."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from tests.bench.realmem import FILES, conversations, file_name, half, load


def _turn(speaker: str, content: str, **extra: object) -> dict:
    return {"speaker": speaker, "is_query": False, "content": content, "query_id": None,
            **extra}


def _point(session_uuid: str, content: str, source_turn: int, snapshot: str) -> dict:
    return {"index": "x", "type": "Dynamic", "content": content, "source_turn": source_turn,
            "source_content_snapshot": snapshot, "source_role_snapshot": "User",
            "session_uuid": session_uuid}


SALARY = "My gross salary is about 600,000 yen each month."
BUDGET = "Groceries usually hit around 70,000 yen."
QUERY = "I'm back. What was the monthly budget we settled on?"


def _user(name: str = "Kenta_Tanaka") -> dict:
    """Four sessions; the question opens the fourth and its reply used two points (one
    counted from 1, one from 0, as the files do) and a point the file lost the turn of."""
    filler = [_turn("User", "Hello."), _turn("Assistant", "Hello! How can I help?")]
    return {"_metadata": {"person_name": name, "total_sessions": 4, "total_tokens": 0},
            "dialogues": [
                {"session_uuid": "a1", "current_time": "2025-12-19 (Friday)",
                 "dialogue_turns": [_turn("User", "Hi."), _turn("User", SALARY)],
                 "extracted_memory": [_point("a1", "Salary 600,000 yen.", 2, SALARY)]},
                {"session_uuid": "b2", "current_time": "2025-12-19 (Friday)",
                 "dialogue_turns": [_turn("User", BUDGET), _turn("Assistant", "Noted.")],
                 "extracted_memory": [_point("b2", "Groceries 70,000 yen.", 0, BUDGET),
                                      _point("b2", "Lost point.", 2, "text no turn has")]},
                {"session_uuid": "c3", "current_time": "2025-12-22 (Monday)",
                 "dialogue_turns": filler, "extracted_memory": []},
                {"session_uuid": "d4", "current_time": "2025-12-23 (Tuesday)",
                 "dialogue_turns": [
                     _turn("User", QUERY, is_query=True, query_id="Q-0001",
                           category_name="Dynamic Updating"),
                     _turn("Assistant", "Groceries at 70,000 yen, from 600,000 gross.",
                           memory_used=[
                               {"session_uuid": "a1", "content": "Salary 600,000 yen."},
                               {"session_uuid": "b2", "content": "Groceries 70,000 yen."},
                               {"session_uuid": "b2", "content": "Lost point."}])],
                 "extracted_memory": []},
            ]}


def test_the_question_holds_the_sessions_before_it_and_the_turns_its_reply_used():
    (conv,), skipped = conversations(_user(), 0)
    question = conv.questions[0]
    assert skipped == 0 and conv.sample_id == "Kenta_Tanaka:Q-0001"
    assert question.text == QUERY and question.evidence == {"D1:2", "D2:1"}
    assert question.answer.startswith("Groceries at 70,000 yen")
    assert [t.dia_id for t in conv.turns] == ["D1:1", "D1:2", "D2:1", "D2:2", "D3:1", "D3:2"]
    assert [t.speaker for t in conv.turns][2:4] == ["User", "Assistant"]
    # Two sessions of one day an hour apart; the question at its session's date.
    assert conv.turns[2].when == datetime(2025, 12, 19, 1, 0, 1, tzinfo=UTC)
    assert conv.asked_at == datetime(2025, 12, 23, 0, 0, 1, tzinfo=UTC)


def test_a_question_whose_evidence_is_all_in_its_own_session_is_skipped():
    data = _user()
    session = data["dialogues"][3]
    session["dialogue_turns"].insert(0, _turn("User", SALARY))
    session["extracted_memory"] = [_point("d4", "Salary again.", 1, SALARY)]
    reply = session["dialogue_turns"][2]
    reply["memory_used"] = [{"session_uuid": "d4", "content": "Salary again."}]
    session["dialogue_turns"][1]["query_id"] = "Q-0002"
    found, skipped = conversations(data, 0)
    assert found == [] and skipped == 1


def test_the_halves_split_the_users_and_a_run_reads_only_its_own(tmp_path):
    development = [u for u in FILES if half(u) == "development"]
    held_out = [u for u in FILES if half(u) == "held-out"]
    assert len(development) == len(held_out) == 5 and not set(development) & set(held_out)
    for user in FILES:
        (tmp_path / file_name(user)).write_text(json.dumps(_user(user)))
    loaded = load(tmp_path, "held-out", 0)
    assert sorted(c.sample_id.split(":")[0] for c in loaded) == sorted(held_out)
    assert len(load(tmp_path, "development", 0, users=2)) == 2
