"""What a person corrects stays corrected in every prompt: what said the old value — the
message, the reply that repeated it, a card or a diary entry that summed it up — is
shown with what the fact says now, and what said a forgotten fact is never shown."""

from __future__ import annotations

from app.db import connect_readonly
from app.events import append_event, session_events
from app.memory import (
    NewCard,
    add_card,
    add_diary_entry,
    correct_fact,
    delete_fact,
    get_fact,
    upsert_fact,
)
from app.memory.forget import forget_fact
from app.memory.restore import restore_forgotten_fact
from app.model.token_count import TokenCounter
from app.turn.context import ContextRequest, build_context
from app.turn.corrected import FORGOTTEN_MESSAGE

TOLD = [("user", "My lawyer is Vidal, at the office on Gran Via."),
        ("assistant", "Noted: Vidal is your lawyer.")]
NOTE = "[corrected since: lawyer is now Ortega]"


def told(writer, config, session: str = "old") -> int:
    """The fact said in `session`, summed up in a card and a diary entry, and learned;
    the fact's id."""
    events = [append_event(writer, config, "ana", session, role, text) for role, text in TOLD]

    def learn(con) -> int:
        add_card(con, "ana", NewCard(session, "Ana's lawyer is Vidal.", "lawyer, Vidal",
                                     events[0].id, events[-1].id, 2), worker="compact")
        add_diary_entry(con, "ana", session, "Ana said her lawyer is Vidal.",
                        is_extractive=False, worker="diary")
        return upsert_fact(con, "ana", "fact", "lawyer", "Vidal", source="agent",
                           worker="distill", source_event_id=events[0].id).fact_id
    return writer.submit(learn)


def ask(writer, config, recall, text: str, session: str = "new", window=()):
    con = connect_readonly(writer.path)
    return build_context(con, config, TokenCounter(), ContextRequest(
        "ana", text, session_id=session, window=list(window), recall=recall))


def lines(ctx) -> list[str]:
    """The prompt's lines, but for the question asked."""
    return [line for m in ctx.messages[:-1] for line in str(m["content"]).splitlines()]


def saying(ctx, word: str) -> list[str]:
    return [line for line in lines(ctx) if word.lower() in line.lower()]


def test_what_said_a_corrected_fact_is_recalled_with_the_correction(writer, config, recall):
    fact_id = told(writer, config)
    writer.submit(lambda con: correct_fact(con, "ana", fact_id, "Ortega"))

    ctx = ask(writer, config, recall, "who is Vidal, my lawyer?")

    said = saying(ctx, "vidal")
    # the message, the reply that repeated it, the card and the diary entry
    assert len(said) == 4, said
    assert all(line.endswith(NOTE) for line in said), said
    assert "- [" in "\n".join(said) and "(fact) lawyer: Ortega" in "\n".join(lines(ctx))


def test_a_second_correction_shows_the_latest_value(writer, config, recall):
    fact_id = told(writer, config)
    corrected = writer.submit(lambda con: correct_fact(con, "ana", fact_id, "Ortega"))
    writer.submit(lambda con: correct_fact(con, "ana", corrected.fact.id, "Ruiz"))

    said = saying(ask(writer, config, recall, "who is Vidal, my lawyer?"), "vidal")

    assert said and all(line.endswith("[corrected since: lawyer is now Ruiz]") for line in said)


def test_what_said_a_deleted_fact_says_so(writer, config, recall):
    fact_id = told(writer, config)
    writer.submit(lambda con: delete_fact(con, "ana", fact_id))

    said = saying(ask(writer, config, recall, "who is Vidal, my lawyer?"), "vidal")

    assert said and all(line.endswith("[corrected since: lawyer: deleted by the user]")
                        for line in said)


def test_what_said_a_forgotten_fact_is_never_recalled(writer, config, recall):
    fact_id = told(writer, config)
    writer.submit(lambda con: forget_fact(con, "ana", fact_id))

    ctx = ask(writer, config, recall, "who is Vidal, my lawyer?")

    assert saying(ctx, "vidal") == []
    assert ctx.explain["events"] == [] and ctx.explain["cards"] == []


def test_the_conversation_itself_carries_the_correction(writer, config, recall):
    fact_id = told(writer, config, session="s")
    writer.submit(lambda con: correct_fact(con, "ana", fact_id, "Ortega"))
    con = connect_readonly(writer.path)
    window = session_events(con, "ana", "s")

    in_window = ask(writer, config, recall, "what is the address of my lawyer?", "s", window)
    history = [{"role": role, "content": text} for role, text in TOLD]
    history.append({"role": "user", "content": "what is the address of my lawyer?"})
    resent = build_context(con, config, TokenCounter(), ContextRequest(
        "ana", history[-1]["content"], session_id="s", window=window, history=history,
        show_window=False, recall=recall))

    for ctx in (in_window, resent):
        said = [m["content"] for m in ctx.messages[1:] if "Vidal" in m["content"]]
        assert len(said) == 2 and all(text.endswith(" " + NOTE) for text in said), said


def test_the_conversation_shows_a_forgotten_message_as_forgotten(writer, config, recall):
    fact_id = told(writer, config, session="s")
    writer.submit(lambda con: forget_fact(con, "ana", fact_id))
    history = [{"role": role, "content": text} for role, text in TOLD]
    history.append({"role": "user", "content": "what is the address of my lawyer?"})
    con = connect_readonly(writer.path)

    ctx = build_context(con, config, TokenCounter(), ContextRequest(
        "ana", history[-1]["content"], session_id="s", window=[], history=history,
        show_window=False, recall=recall))

    assert [m["content"] for m in ctx.messages[1:]] == [
        FORGOTTEN_MESSAGE, FORGOTTEN_MESSAGE, "what is the address of my lawyer?"]


def test_a_worker_s_newer_value_and_what_is_said_after_a_correction_are_not_marked(
        writer, config, recall):
    fact_id = told(writer, config)
    writer.submit(lambda con: upsert_fact(con, "ana", "fact", "lawyer", "Ortega",
                                          source="agent", worker="distill"))
    assert all("corrected" not in line
               for line in saying(ask(writer, config, recall, "my lawyer Vidal?"), "vidal"))

    writer.submit(lambda con: correct_fact(con, "ana", fact_id + 1, "Ruiz"))
    append_event(writer, config, "ana", "later", "user", "Vidal called about the contract.")

    said = saying(ask(writer, config, recall, "did Vidal call?"), "vidal")
    assert [line for line in said if "Vidal called" in line and "corrected" not in line]


# -- which running prompts start anew ------------------------------------------------------


def turn(writer, config, recall, text: str, plan, session: str = "s"):
    """A turn of a session whose client resends its history: the stretch carried on."""
    con = connect_readonly(writer.path)
    history = [*({"role": role, "content": said} for role, said in TOLD),
               {"role": "user", "content": text}]
    return build_context(con, config, TokenCounter(), ContextRequest(
        "ana", text, session_id=session, window=[], history=history, show_window=False,
        plan=plan, recall=recall))


def test_a_correction_the_prompt_does_not_show_keeps_its_stretch(writer, config, recall):
    told(writer, config, session="s")
    other = writer.submit(lambda con: upsert_fact(con, "ana", "preference", "editor",
                                                  "uses helix", source="user", worker="user"))
    first = turn(writer, config, recall, "what is the address of my lawyer?", None)
    assert "helix" not in "\n".join(lines(first))

    writer.submit(lambda con: correct_fact(con, "ana", other.fact_id, "uses zed"))
    later = turn(writer, config, recall, "and his phone number?", first.plan)

    assert later.explain["stretch"]["turn"] == "continued"
    assert later.messages[0] == first.messages[0]


def test_a_correction_of_what_the_conversation_said_starts_the_prompt_anew(
        writer, config, recall):
    fact_id = told(writer, config, session="s")
    first = turn(writer, config, recall, "what is the address of my lawyer?", None)

    writer.submit(lambda con: correct_fact(con, "ana", fact_id, "Ortega"))
    later = turn(writer, config, recall, "and his phone number?", first.plan)

    assert later.explain["stretch"] == {"turn": "new", "why": "memory was forgotten or corrected"}
    assert later.messages[1]["content"].endswith(NOTE)


def test_a_forget_undone_recalls_again_what_said_the_value(writer, config, recall):
    fact_id = told(writer, config)
    corrected = writer.submit(lambda con: correct_fact(con, "ana", fact_id, "Ortega"))
    said_ortega = append_event(writer, config, "ana", "later", "user", "Ortega called me today.")
    held = writer.submit(lambda con: get_fact(con, "ana", corrected.fact.id))
    writer.submit(lambda con: forget_fact(con, "ana", corrected.fact.id))
    assert saying(ask(writer, config, recall, "did Ortega call?"), "ortega") == []

    writer.submit(lambda con: restore_forgotten_fact(con, held))  # the memory page's undo

    ctx = ask(writer, config, recall, "did Ortega or Vidal call?")
    assert "Ortega called me today." in "\n".join(saying(ctx, "ortega"))
    assert said_ortega.id in [e["id"] for e in ctx.explain["events"]]
    assert saying(ctx, "vidal") == []  # its earlier value stays forgotten
