"""distill: profile and dated facts from a turn, validated, deduplicated, provenance kept."""

from __future__ import annotations

import json

import pytest

from app.events import append_event
from app.learn.distill import (
    Held,
    TurnEvent,
    distill_schema,
    distill_turn,
    held_by,
    learning_prompt,
    needs_compaction,
    parse_extraction,
)
from app.learn.model_output import InvalidOutput, output_limit
from app.learn.quoting import QUOTED_LABEL
from app.memory import delete_fact, facts_as_of, list_facts, list_profile, profile_as_of
from app.model.replies import SentChat
from app.timeutil import utc_now
from tests.workers.support import add_turn, query, scalar, snapshot


def distill(job_parts, ids, user="ana", session="s1"):
    cfg, writer, model, _ = job_parts
    return distill_turn(writer, model, cfg, user, session, ids)


def current_facts(cfg, user="ana"):
    return {(f.category, f.key): f.value for f in list_facts_of(cfg, user)}


def list_facts_of(cfg, user="ana"):
    from tests.workers.support import read_only

    con = read_only(cfg)
    try:
        return list_facts(con, user)
    finally:
        con.close()


def test_a_turn_yields_profile_and_facts_with_provenance(job_parts):
    cfg, writer, _, _ = job_parts
    ids = add_turn(writer, cfg, "ana", "s1", "Hi, my name is Ana and I use helix as my editor.")
    result = distill(job_parts, ids)
    assert result.events == 2
    assert current_facts(cfg) == {("preference", "editor"): "uses helix"}
    assert query(cfg, "SELECT key, value, source FROM profile") == [("name", "Ana", "agent")]
    log = query(cfg, "SELECT owner_kind, action, worker, source_event_id FROM memory_log ORDER BY id")
    assert log == [("profile", "insert", "distill", ids[0]), ("fact", "insert", "distill", ids[0])]


def test_the_request_carries_a_bounded_schema_its_output_limit_and_a_low_temperature(job_parts):
    cfg, writer, _, fake = job_parts
    distill(job_parts, add_turn(writer, cfg, "ana", "s1", "my name is Ana"))
    body = fake.bodies("/api/generate")[0]
    schema = distill_schema(1)  # one message to learn from: a few items at most
    assert body["format"] == schema
    assert schema["properties"]["facts"]["maxItems"] == 2
    assert schema["properties"]["facts"]["items"]["properties"]["value"]["maxLength"] == 100
    assert body["options"]["temperature"] == 0.1
    assert body["options"]["num_predict"] == output_limit(schema) < 500
    assert body["stream"] is True  # a deadline can cut only a streamed read


def test_events_are_marked_distilled_so_a_second_run_does_nothing(job_parts):
    cfg, writer, _, fake = job_parts
    ids = add_turn(writer, cfg, "ana", "s1", "Remember code alpha1 please.")
    distill(job_parts, ids)
    before = snapshot(cfg)
    calls = len(fake.bodies("/api/generate"))
    assert distill(job_parts, ids).events == 0
    assert snapshot(cfg) == before
    assert len(fake.bodies("/api/generate")) == calls  # no model call either
    assert scalar(cfg, "SELECT count(*) FROM events WHERE distilled_at IS NULL") == 0


def test_assistant_text_is_context_never_a_source(job_parts):
    cfg, writer, _, fake = job_parts
    ids = add_turn(writer, cfg, "ana", "s1", "Which editor would you suggest?",
                   "You could try kakoune, many people like it.")
    # A model that falls for the assistant's words:
    fake.script_generate({"profile": {}, "facts": [
        {"category": "preference", "key": "editor", "value": "uses kakoune"}]})
    result = distill(job_parts, ids)
    assert current_facts(cfg) == {}
    assert result.dropped == 1
    prompt = fake.bodies("/api/generate")[0]["prompt"]
    assert "ASSISTANT (context only): You could try kakoune" in prompt


def test_a_turn_with_only_assistant_text_calls_no_model(job_parts):
    from app.events import append_event

    cfg, writer, _, fake = job_parts
    event = append_event(writer, cfg, "ana", "s1", "assistant", "Good morning!")
    assert distill(job_parts, [event.id]).events == 1
    assert fake.bodies("/api/generate") == []


def test_output_wrapped_in_prose_is_parsed_and_placeholders_dropped(job_parts):
    cfg, writer, _, fake = job_parts
    ids = add_turn(writer, cfg, "ana", "s1", "I live in Madrid, I have no pets.")
    fake.script_generate("Sure! Here is the JSON:\n```json\n" + json.dumps({
        "profile": {"city": "Madrid", "pets": "none", "age": "unknown", "job": None},
        "facts": [{"category": "fact", "key": "pets", "value": "N/A"},
                  {"category": "preference", "key": "", "value": ""},
                  {"category": "facts", "key": "home", "value": "lives in Madrid"},
                  {"category": "gossip", "key": "x", "value": "y"}],
    }) + "\n```\nHope it helps.")
    distill(job_parts, ids)
    assert query(cfg, "SELECT key, value FROM profile") == [("city", "Madrid")]
    assert current_facts(cfg) == {("fact", "home"): "lives in Madrid"}


def test_empty_lists_write_nothing_but_the_distilled_mark(job_parts):
    cfg, writer, _, fake = job_parts
    ids = add_turn(writer, cfg, "ana", "s1", "ok thanks")
    fake.script_generate({"profile": {}, "facts": []})
    before = snapshot(cfg)
    distill(job_parts, ids)
    after = snapshot(cfg)
    assert after["facts"] == before["facts"] == [] and after["profile"] == [] and after["memory_log"] == []
    assert scalar(cfg, "SELECT count(*) FROM events WHERE distilled_at IS NOT NULL") == 2


@pytest.mark.parametrize("text", ["I cannot help with that.", '{"profile": [', '"just a string"',
                                  '{"answer": 42}'])
def test_output_that_is_not_an_extraction_is_invalid_and_writes_nothing(job_parts, text):
    cfg, writer, _, fake = job_parts
    ids = add_turn(writer, cfg, "ana", "s1", "my name is Ana")
    fake.script_generate(text)
    before = snapshot(cfg)
    with pytest.raises(InvalidOutput):
        distill(job_parts, ids)
    assert snapshot(cfg) == before  # not even the distilled mark: it will be retried


def test_parse_accepts_a_bare_list_of_facts():
    extraction = parse_extraction([{"category": "Decision", "key": "db", "value": "use Postgres 16"}])
    assert extraction.facts == [("decision", "db", "use Postgres 16")]


# -- dedupe, supersede, tombstone, as_of ---------------------------------------------------------


def test_same_key_with_a_new_value_supersedes_and_keeps_history(job_parts):
    cfg, writer, _, _ = job_parts
    distill(job_parts, add_turn(writer, cfg, "ana", "s1", "I use vim as my editor"))
    distill(job_parts, add_turn(writer, cfg, "ana", "s1", "I use helix as my editor"))
    assert current_facts(cfg) == {("preference", "editor"): "uses helix"}
    rows = query(cfg, "SELECT value, superseded_at IS NOT NULL, superseded_by FROM facts ORDER BY id")
    assert [r[:2] for r in rows] == [("uses vim", 1), ("uses helix", 0)]
    assert rows[0][2] is not None
    assert query(cfg, "SELECT action, old_value, new_value FROM memory_log WHERE owner_kind = 'fact' "
                      "ORDER BY id") == [("insert", None, "uses vim"), ("supersede", "uses vim", "uses helix")]


def test_the_same_value_again_adds_no_row(job_parts):
    cfg, writer, _, _ = job_parts
    distill(job_parts, add_turn(writer, cfg, "ana", "s1", "I use vim as my editor"))
    distill(job_parts, add_turn(writer, cfg, "ana", "s2", "I use vim as my editor"))
    assert scalar(cfg, "SELECT count(*) FROM facts") == 1


def test_similar_text_under_another_key_updates_the_current_row(job_parts):
    cfg, writer, _, fake = job_parts
    fake.script_generate(
        {"profile": {}, "facts": [{"category": "fact", "key": "staging database",
                                   "value": "staging postgres runs on host db2"}]},
        {"profile": {}, "facts": [{"category": "fact", "key": "staging db host",
                                   "value": "the staging postgres runs on host db2 since March"}]},
    )
    distill(job_parts, add_turn(writer, cfg, "ana", "s1", "staging postgres runs on host db2"))
    distill(job_parts, add_turn(writer, cfg, "ana", "s1",
                            "the staging postgres runs on host db2 since March"))
    assert current_facts(cfg) == {
        ("fact", "staging database"): "the staging postgres runs on host db2 since March"}
    assert scalar(cfg, "SELECT count(*) FROM facts WHERE superseded_at IS NOT NULL") == 1


def test_the_similarity_threshold_comes_from_the_config(job_parts):
    cfg, writer, model, fake = job_parts
    first = {"category": "fact", "key": "staging database",
             "value": "staging postgres runs on host db2"}
    second = {"category": "fact", "key": "staging db host",
              "value": "staging postgres moved to host db7"}

    def two_turns(config, session):
        fake.script_generate({"profile": {}, "facts": [first]}, {"profile": {}, "facts": [second]})
        for said in (first["value"], second["value"]):
            distill_turn(writer, model, config, "ana", session,
                         add_turn(writer, config, "ana", session, said))

    two_turns(cfg, "s1")  # the default, 0.75: different enough to be two facts
    assert len(current_facts(cfg)) == 2
    loose = cfg.replace(memory={"dedupe_similarity": 0.1})
    writer.submit(lambda con: con.execute("DELETE FROM facts"))
    two_turns(loose, "s2")  # a loose threshold folds the second into the first
    assert current_facts(cfg) == {("fact", "staging database"): second["value"]}


def test_unrelated_facts_in_one_category_stay_apart(job_parts):
    cfg, writer, _, fake = job_parts
    fake.script_generate(
        {"profile": {}, "facts": [{"category": "preference", "key": "indent", "value": "prefers tabs"}]},
        {"profile": {}, "facts": [{"category": "preference", "key": "theme", "value": "prefers dark themes"}]},
    )
    distill(job_parts, add_turn(writer, cfg, "ana", "s1", "I prefer tabs"))
    distill(job_parts, add_turn(writer, cfg, "ana", "s1", "I prefer dark themes"))
    assert len(current_facts(cfg)) == 2


def test_a_fact_the_user_deleted_is_never_recreated_by_the_worker(job_parts):
    cfg, writer, _, fake = job_parts
    distill(job_parts, add_turn(writer, cfg, "ana", "s1", "I use vim as my editor"))
    fact = list_facts_of(cfg)[0]
    assert writer.submit(lambda con: delete_fact(con, "ana", fact.id))
    distill(job_parts, add_turn(writer, cfg, "ana", "s1", "I use vim as my editor"))
    fake.script_generate({"profile": {}, "facts": [
        {"category": "preference", "key": "main editor", "value": "uses vim"}]})
    distill(job_parts, add_turn(writer, cfg, "ana", "s1", "vim, always vim"))
    assert current_facts(cfg) == {}
    assert scalar(cfg, "SELECT count(*) FROM facts") == 1


def test_a_profile_key_the_user_deleted_is_never_recreated(job_parts):
    from app.memory import delete_profile

    cfg, writer, _, _ = job_parts
    distill(job_parts, add_turn(writer, cfg, "ana", "s1", "my name is Ana"))
    writer.submit(lambda con: delete_profile(con, "ana", "name"))
    distill(job_parts, add_turn(writer, cfg, "ana", "s1", "my name is Ana"))
    assert query(cfg, "SELECT key FROM profile WHERE deleted_at IS NULL") == []


def test_as_of_answers_what_the_profile_and_facts_said_at_a_time(job_parts):
    from tests.workers.support import read_only

    cfg, writer, _, _ = job_parts
    distill(job_parts, add_turn(writer, cfg, "ana", "s1", "my name is Ana. I use vim as my editor"))
    between = utc_now()
    distill(job_parts, add_turn(writer, cfg, "ana", "s1", "my name is Anita. I use helix as my editor"))
    con = read_only(cfg)
    try:
        assert profile_as_of(con, "ana", between) == {"name": "Ana"}
        assert [f.value for f in facts_as_of(con, "ana", between)] == ["uses vim"]
        assert profile_as_of(con, "ana", utc_now()) == {"name": "Anita"}
        assert [f.value for f in facts_as_of(con, "ana", utc_now())] == ["uses helix"]
        assert list_profile(con, "ana")[0].value == "Anita"
    finally:
        con.close()


def test_users_never_share_facts(job_parts):
    cfg, writer, _, _ = job_parts
    distill(job_parts, add_turn(writer, cfg, "ana", "s1", "I use vim as my editor"), user="ana")
    distill(job_parts, add_turn(writer, cfg, "bo", "s1", "I use emacs as my editor"), user="bo")
    assert current_facts(cfg, "ana") == {("preference", "editor"): "uses vim"}
    assert current_facts(cfg, "bo") == {("preference", "editor"): "uses emacs"}


def test_compaction_is_due_at_the_threshold(job_parts):
    from tests.workers.support import read_only

    cfg, writer, _, _ = job_parts
    for n in range(cfg.memory.compaction_threshold // 2):
        add_turn(writer, cfg, "ana", "s1", f"turn {n}")
    con = read_only(cfg)
    try:
        assert needs_compaction(con, cfg, "ana", "s1")
        assert not needs_compaction(con, cfg, "ana", "other")
    finally:
        con.close()


# -- a learning call after the chat that holds its turns ------------------------------------


def chat_holding(*turns: tuple[str, str], before: int = 0) -> SentChat:
    """A chat the server answered: a system prompt, `before` older messages, then `turns`
    (user, assistant), the last reply being the chat's own."""
    older = [{"role": "user" if n % 2 == 0 else "assistant", "content": f"older {n}"}
             for n in range(before)]
    messages = [{"role": "system", "content": "Be brief."}, *older]
    for user, assistant in turns[:-1]:
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    messages.append({"role": "user", "content": "<memory>\nrecalled\n</memory>\n\n" + turns[-1][0]})
    return SentChat("/api/chat", {"model": "gemma3:4b", "messages": messages}, turns[-1][1])


def test_a_learning_call_points_at_the_turns_the_chat_already_holds(job_parts):
    cfg, writer, model, fake = job_parts
    turns = [("Remember code alpha1, please", "Noted."), ("And code alpha2 as well", "Done.")]
    ids = [i for user, reply in turns for i in add_turn(writer, cfg, "ana", "s1", user, reply)]
    distill_turn(writer, model, cfg, "ana", "s1", ids, after=chat_holding(*turns))
    [asked] = fake.bodies("/api/chat")
    question = asked["messages"][-1]["content"]
    assert "the last 4 messages above" in question and 'begins "Remember code alpha1, please"' in question
    assert "\nUSER: " not in question and "And code alpha2 as well" not in question  # not again
    assert sorted(v for (v,) in query(cfg, "SELECT value FROM facts")) == ["alpha1", "alpha2"]


def test_turns_further_up_the_chat_are_pointed_at_from_its_end():
    events = [TurnEvent(1, "user", "Remember code alpha1"), TurnEvent(2, "assistant", "Noted.")]
    chat = chat_holding(("Remember code alpha1", "Noted."), ("Anything else?", "No."))
    assert held_by(chat, events) == Held(count=2, after=2)
    prompt = learning_prompt(events, chat=chat)
    assert "2 messages above, ending 2 messages before the last one" in prompt


@pytest.mark.parametrize("case", ["not all held", "from outside", "no chat"])
def test_turns_the_chat_does_not_hold_are_quoted(case):
    events = [TurnEvent(1, "user", "Remember code alpha1"), TurnEvent(2, "assistant", "Noted."),
              TurnEvent(3, "user", "And alpha2", from_outside=case == "from outside"),
              TurnEvent(4, "assistant", "Done.")]
    if case == "not all held":
        events[0] = TurnEvent(1, "user", "Something said before the chat's window")
    chat = None if case == "no chat" else chat_holding(("Remember code alpha1", "Noted."),
                                                       ("And alpha2", "Done."))
    assert held_by(chat, events) is None
    prompt = learning_prompt(events, chat=chat)
    if case == "from outside":  # quoted as app/learn/quoting.py says, never as the user's line
        assert f"{QUOTED_LABEL}:\n> And alpha2" in prompt and "USER: And alpha2" not in prompt
    else:
        assert "USER: And alpha2" in prompt
    assert "messages above" not in prompt


def test_a_chat_holding_outside_content_is_quoted_not_pointed_at(job_parts):
    """Only the owner's own turns are pointed at in the chat; a turn from outside (documents
    a client retrieved) is quoted, even when the chat above holds it."""
    cfg, writer, model, fake = job_parts
    own = add_turn(writer, cfg, "ana", "s1", "Remember code alpha1, please", "Noted.")
    rag = append_event(writer, cfg, "ana", "s1", "user", "<context>code alpha2</context>",
                       origin="typed", from_outside=True)
    reply = append_event(writer, cfg, "ana", "s1", "assistant", "Done.", origin="model",
                         from_outside=True)
    chat = chat_holding(("Remember code alpha1, please", "Noted."),
                        ("<context>code alpha2</context>", "Done."))
    distill_turn(writer, model, cfg, "ana", "s1", [*own, rag.id, reply.id], after=chat)
    [asked] = fake.bodies("/api/chat")
    question = asked["messages"][-1]["content"]
    assert "messages above" not in question
    assert "USER: Remember code alpha1, please" in question
    assert f"{QUOTED_LABEL}:\n> <context>code alpha2</context>" in question
