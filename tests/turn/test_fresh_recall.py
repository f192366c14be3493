"""What a turn recalls is fresh: it never repeats what the request already carries, and
what the user forgets or corrects leaves the very next prompt, in running sessions too."""

from __future__ import annotations

from app.db import connect_readonly
from app.events import append_event
from app.learn.compact import CardText, ChunkEvent, write_card
from app.memory import correct_fact, delete_profile, set_profile, upsert_fact
from app.memory.forget import forget_fact
from app.model.token_count import TokenCounter
from app.turn.context import HEADERS, ContextRequest, build_context


def prompt_text(ctx) -> str:
    return "\n".join(str(m.get("content")) for m in ctx.messages)


def quoted_lines(ctx) -> str:
    """The past messages the prompt quotes, in the system prompt and in notes."""
    sections = prompt_text(ctx).split(HEADERS["events"])[1:]
    return "\n".join(section.split("\n\n")[0] for section in sections)


# -- never the request again -------------------------------------------------------------------

DOG_TALK = [("user", "My dog Pixel loves the beach at Sitges in the morning"),
            ("assistant", "Sitges is lovely for dogs early in the day"),
            ("user", "Pixel also likes the pine woods near Garraf")]


def stored_and_compacted(writer, config, session: str, messages):
    events = [append_event(writer, config, "ana", session, role, text) for role, text in messages]
    writer.submit(lambda con: con.execute(
        "UPDATE events SET compacted = 1 WHERE session_id = ?", (session,)))
    return events


def test_a_clients_resent_history_is_not_quoted_back_once_compacted(writer, config, recall):
    stored_and_compacted(writer, config, "s", DOG_TALK)
    history = [{"role": role, "content": text} for role, text in DOG_TALK]
    history += [{"role": "assistant", "content": "Both are good walks."},
                {"role": "user", "content": "Where does Pixel like to walk, beach or woods?"}]
    con = connect_readonly(writer.path)

    ctx = build_context(con, config, TokenCounter(), ContextRequest(
        "ana", history[-1]["content"], session_id="s", window=[], history=history,
        show_window=False, recall=recall))

    assert ctx.explain["events"] == []
    assert "Sitges" not in quoted_lines(ctx) and "Garraf" not in quoted_lines(ctx)


def second_request(writer, config, recall, learn, question: str):
    """A client's conversation: its first request, then the worker learns from what was
    said so far (`learn`), then the client resends it all with `question`."""
    config = config.replace(memory={"fill_first_message": False})  # room for notes
    con = connect_readonly(writer.path)
    first = build_context(con, config, TokenCounter(), ContextRequest(
        "ana", "hello there", session_id="s", window=[], history=[
            {"role": "user", "content": "hello there"}], show_window=False, recall=recall))
    said = [("user", "hello there"), ("assistant", "hi"), *DOG_TALK]
    learn(writer, config, "s", said)
    history = [{"role": role, "content": text} for role, text in said]
    history.append({"role": "user", "content": question})
    later = build_context(con, config, TokenCounter(), ContextRequest(
        "ana", question, session_id="s", window=[], history=history, show_window=False,
        plan=first.plan, recall=recall))
    assert later.explain["stretch"]["turn"] == "continued"
    return later


def test_a_later_message_gets_no_note_quoting_what_the_client_resent(writer, config, recall):
    later = second_request(writer, config, recall, stored_and_compacted,
                           "Remind me: the beach Pixel loves, Sitges?")

    assert later.explain["note"]["events"] == []
    assert not later.messages[-1]["content"].startswith("<memory>")


def test_a_recalled_line_the_request_already_says_is_left_out(writer, config, recall):
    earlier = stored_and_compacted(writer, config, "old", [
        ("user", "I moved to Lisbon in May"), ("user", "Lisbon has steep hills and trams")])
    con = connect_readonly(writer.path)

    ctx = build_context(con, config, TokenCounter(), ContextRequest(
        "ana", "I moved to Lisbon in May", session_id="new", window=[], recall=recall))

    assert {e["id"] for e in ctx.explain["events"]} == {earlier[1].id}
    assert "user: I moved to Lisbon in May" not in quoted_lines(ctx)


def learned_from(writer, config, session: str, messages):
    """The messages stored, compacted into an extractive card, and a fact learned from the
    first; and a fact of another session."""
    events = [append_event(writer, config, "ana", session, role, text) for role, text in messages]
    chunk = [ChunkEvent(e.id, e.role, e.content, e.importance) for e in events]

    def learn(con):
        write_card(con, "ana", session, chunk, CardText(
            "The user discussed: " + " ".join(e.content for e in events), "dog, beach, woods",
            is_extractive=True))
        upsert_fact(con, "ana", "fact", "pet", "a dog, Pixel, who loves the beach at Sitges",
                    source="agent", worker="distill", source_event_id=events[0].id)
        upsert_fact(con, "ana", "fact", "home", "lives near the beach in Barcelona",
                    source="agent", worker="distill")
    writer.submit(learn)


def test_what_was_learned_from_the_resent_history_is_not_recalled_from_it(writer, config,
                                                                          recall):
    learned_from(writer, config, "s", DOG_TALK)
    history = [{"role": role, "content": text} for role, text in DOG_TALK]
    history.append({"role": "user", "content": "Which beach near home for Pixel, Sitges?"})
    con = connect_readonly(writer.path)

    ctx = build_context(con, config, TokenCounter(), ContextRequest(
        "ana", history[-1]["content"], session_id="s", window=[], history=history,
        show_window=False, recall=recall))

    system = ctx.system_prompt
    assert "lives near the beach in Barcelona" in system  # learned elsewhere
    assert "who loves the beach at Sitges" not in system and "The user discussed" not in system


def test_a_note_recalls_nothing_learned_from_what_the_client_resent(writer, config, recall):
    later = second_request(writer, config, recall, learned_from,
                           "Which beach near home for Pixel, Sitges?")

    note = later.messages[-1]["content"]
    assert "lives near the beach in Barcelona" in note
    assert "who loves the beach at Sitges" not in note and "The user discussed" not in note


# -- what the user takes back leaves the next prompt -------------------------------------------

def turn(con, config, text: str, n: int, plan, recall):
    """A session's turn as ChatService builds it (window mode, the plan carried on)."""
    return build_context(con, config, TokenCounter(), ContextRequest(
        "ana", text, session_id="s", window=[], plan=plan, message_id=n, recall=recall))


def seeded(writer):
    def seed(con):
        set_profile(con, "ana", "shell", "fish", source="user", worker="user")
        upsert_fact(con, "ana", "preference", "editor", "uses helix, not vim",
                    source="user", worker="user")
    writer.submit(seed)
    return connect_readonly(writer.path)


def editor_fact(con) -> int:
    return con.execute("SELECT id FROM facts WHERE key = 'editor' AND deleted_at IS NULL "
                       "AND superseded_at IS NULL").fetchone()[0]


def test_a_fact_forgotten_mid_session_leaves_the_next_prompt(writer, config, recall):
    con = seeded(writer)
    first = turn(con, config, "which editor do I use?", 1, None, recall)
    fact_id = editor_fact(con)
    assert "uses helix, not vim" in prompt_text(first)

    writer.submit(lambda c: forget_fact(c, "ana", fact_id))
    later = turn(con, config, "and which shell?", 3, first.plan, recall)

    assert "helix" not in prompt_text(later)
    assert fact_id not in [f["id"] for f in later.explain["facts"]]
    assert later.explain["stretch"] == {"turn": "new", "why": "memory was forgotten or corrected"}


def test_a_correction_or_a_deleted_profile_key_leaves_the_next_prompt(writer, config, recall):
    con = seeded(writer)
    first = turn(con, config, "which editor and shell do I use?", 1, None, recall)
    assert "uses helix, not vim" in prompt_text(first) and "shell: fish" in prompt_text(first)

    writer.submit(lambda c: correct_fact(c, "ana", editor_fact(c), "uses zed now"))
    corrected = turn(con, config, "and my editor?", 3, first.plan, recall)
    writer.submit(lambda c: delete_profile(c, "ana", "shell"))
    deleted = turn(con, config, "and my shell?", 5, corrected.plan, recall)

    assert "helix" not in prompt_text(corrected) and "uses zed now" in prompt_text(corrected)
    assert "fish" not in prompt_text(deleted)


def test_what_a_worker_learns_keeps_the_sessions_prompt_cache(writer, config, recall):
    con = seeded(writer)
    first = turn(con, config, "which editor do I use?", 1, None, recall)

    writer.submit(lambda c: upsert_fact(c, "ana", "fact", "pet", "has a dog called Pixel",
                                        source="agent", worker="distill"))
    later = turn(con, config, "and my dog?", 3, first.plan, recall)

    assert later.explain["stretch"]["turn"] == "continued"
    assert later.messages[0] == first.messages[0]
