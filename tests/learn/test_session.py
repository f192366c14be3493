"""Learning a session costs a bounded number of model calls: no turn is asked about twice,
and an unusable answer is asked again once, then the rest is learned by rule."""

from __future__ import annotations

from app.events import append_event, supersede_events
from app.learn.session import learn_session
from tests.fake_ollama import Fault
from tests.workers.support import add_turn, scripted_model

GARBAGE = "Sure! Here is what I found: the user talked about codes {profile: maybe"


def small_chunks(cfg):
    return cfg.replace(memory={"compaction_threshold": 8, "chunk_size": 4})


def learning_prompts(fake) -> list[str]:
    return [body["prompt"] for body in fake.bodies("/api/generate")]


def test_a_chunk_that_holds_an_earlier_tail_asks_about_none_of_its_turns_again(job_parts):
    cfg, writer, model, fake = job_parts
    cfg = small_chunks(cfg)
    for n in range(1, 7):
        add_turn(writer, cfg, "ana", "s1", f"Remember code alpha{n}")
    append_event(writer, cfg, "ana", "s1", "user", "Remember code alpha7",
                 origin="typed")  # event 13
    learn_session(writer, model, cfg, "ana", "s1")  # the tail, events 9-13, learned
    append_event(writer, cfg, "ana", "s1", "assistant", "Noted.", origin="model")
    for n in range(8, 11):
        add_turn(writer, cfg, "ana", "s1", f"Remember code alpha{n}")

    learn_session(writer, model, cfg, "ana", "s1")  # a chunk 13-16 holds event 13

    asked = [p for p in learning_prompts(fake) if "USER: Remember code alpha7" in p.splitlines()]
    assert len(asked) == 1  # asked about once; shown later only as context
    assert any("EARLIER (already learned, context only) USER: Remember code alpha7" in p
               for p in learning_prompts(fake))
    rows = writer.submit(lambda con: list(con.execute(
        "SELECT value FROM facts WHERE key = 'item7'")))
    assert rows == [("alpha7",)]


def test_an_unusable_answer_is_asked_again_once_and_the_second_used(job_parts):
    cfg, writer, model, fake = job_parts
    fake.script_generate(GARBAGE)
    add_turn(writer, cfg, "ana", "s1", "Remember code alpha1")

    result = learn_session(writer, model, cfg, "ana", "s1")

    assert (result.calls, result.fell_back, len(fake.bodies("/api/generate"))) == (2, False, 2)
    assert writer.submit(lambda con: con.execute(
        "SELECT value FROM facts").fetchall()) == [("alpha1",)]


def test_two_unusable_answers_end_the_calls_and_the_rest_is_learned_by_rule(job_parts):
    cfg, writer, model, fake = job_parts
    cfg = small_chunks(cfg)
    fake.responder = lambda body: GARBAGE
    for n in range(1, 9):
        add_turn(writer, cfg, "ana", "s1", f"Remember that my locker code is {n}{n}{n}")

    result = learn_session(writer, model, cfg, "ana", "s1")

    assert len(fake.bodies("/api/generate")) == 2 and result.calls == 2
    assert result.fell_back and len(result.unusable) == 2
    undone, cards = writer.submit(lambda con: con.execute(
        "SELECT (SELECT count(*) FROM events WHERE distilled_at IS NULL), "
        "(SELECT count(*) FROM context_cards WHERE is_extractive = 1)").fetchone())
    assert undone == 0 and cards == 3  # every turn learned, every chunk due carded, by rule

    again = learn_session(writer, model, cfg, "ana", "s1")  # another job, later
    assert again.calls == 0 and len(fake.bodies("/api/generate")) == 2


def test_a_call_cut_at_its_budget_is_not_asked_again_and_the_rest_is_learned_by_rule(job_parts):
    cfg, writer, model, fake = job_parts
    cfg = small_chunks(cfg)
    fake.script_generate(Fault.endless())  # the model loops inside its JSON
    for n in range(1, 9):
        add_turn(writer, cfg, "ana", "s1", f"Remember that my locker code is {n}{n}{n}")

    result = learn_session(writer, model, cfg, "ana", "s1")

    assert len(fake.bodies("/api/generate")) == 1 and result.calls == 1  # not asked again
    assert result.fell_back and "output limit" in result.unusable[0]
    undone, facts = writer.submit(lambda con: con.execute(
        "SELECT (SELECT count(*) FROM events WHERE distilled_at IS NULL), "
        "(SELECT count(DISTINCT owner_id) FROM memory_log WHERE owner_kind = 'fact' "
        "AND worker = 'distill-rules')").fetchone())
    assert undone == 0 and facts == 8  # every locker code, by rule


def test_a_good_model_learns_a_session_without_a_retry(job_parts):
    cfg, writer, model, fake = job_parts
    fake.responder = scripted_model
    for n in range(1, 9):
        add_turn(writer, small_chunks(cfg), "ana", "s1", f"Remember code alpha{n}")

    result = learn_session(writer, model, small_chunks(cfg), "ana", "s1")

    assert not result.fell_back and result.unusable == []
    assert result.calls == len(fake.bodies("/api/generate"))



def test_a_reply_the_client_regenerated_is_never_learned_from(job_parts):
    cfg, writer, model, fake = job_parts
    cfg = small_chunks(cfg)
    question, rejected = add_turn(writer, cfg, "ana", "s1", "Name my boat",
                                  "Call it Sirena.")
    chosen = append_event(writer, cfg, "ana", "s1", "assistant", "Call it Albatros.")
    writer.submit(lambda con: supersede_events(con, "ana", [rejected], chosen.id))
    for n in range(1, 4):
        add_turn(writer, cfg, "ana", "s1", f"Remember code alpha{n}")

    learn_session(writer, model, cfg, "ana", "s1")  # one chunk (card and facts), then the tail

    prompts = "\n".join(learning_prompts(fake))
    assert "Albatros" in prompts and "Sirena" not in prompts
