"""Context assembly: the layers, their priority, and a budget that is never exceeded."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app import events
from app.config import Config
from app.db import connect_readonly
from app.events import Event
from app.memory import set_profile, upsert_fact
from app.model.token_count import MESSAGE_OVERHEAD_TOKENS, TokenCounter, estimate_tokens
from app.recall.state import Recall
from app.turn.context import HEADERS, ContextRequest, build_context

# The conversation as it went: the person's messages typed, the model's replies.
ORIGIN_OF = {"user": "typed", "assistant": "model", "tool": "hilo_tool", "system": "task"}


def append_event(writer, config, user_id, session_id, role, content, **fields) -> Event:
    fields.setdefault("origin", ORIGIN_OF[role])
    return events.append_event(writer, config, user_id, session_id, role, content, **fields)


def with_ctx(config: Config, num_ctx: int, reply_reserve: int, **memory) -> Config:
    return config.replace(llm={"num_ctx": num_ctx, "reply_reserve": reply_reserve},
                          memory=memory)


def fake_event(i: int, content: str, role: str = "user") -> Event:
    return Event(id=i, uuid=f"u{i}", user_id="ana", session_id="s", role=role,
                 content=content, created_at="2026-11-30T10:00:00Z", importance=0.5)


@pytest.fixture
def rich_memory(writer, config):
    """A user with a long profile, many facts, cards and a diary entry."""
    def seed(con):
        for i in range(60):
            set_profile(con, "ana", f"attribute {i}", f"value {i} " * (i % 7 + 1),
                        source="agent", worker="test")
        for i in range(80):
            upsert_fact(con, "ana", "fact", f"topic {i}", f"ana said thing {i} about rust " * 3,
                        source="agent", worker="test")
        upsert_fact(con, "ana", "preference", "editor", "uses helix, not vim",
                    source="user", worker="test")
        for i in range(20):
            con.execute(
                "INSERT INTO context_cards (user_id, session_id, summary, keywords, first_event_id,"
                " created_at, updated_at) VALUES ('ana', 'old', ?, 'deploy, docker', ?, ?, ?)",
                (f"Discussed deploying service {i} with docker compose. " * 4, i,
                 f"2026-10-{i + 1:02d}T00:00:00Z", f"2026-10-{i + 1:02d}T00:00:00Z"))
        con.execute("INSERT INTO sessions (user_id, id, started_at, last_event_at, ended_at) "
                    "VALUES ('ana', 'old', 't', 't', 't')")
        con.execute("INSERT INTO diary (user_id, session_id, entry, created_at) VALUES "
                    "('ana', 'old', 'Ana set up the staging server and chose Postgres.', "
                    "'2026-10-20T00:00:00Z')")
        for i in range(40):
            con.execute(
                "INSERT INTO events (uuid, user_id, session_id, role, content, created_at, "
                "importance, compacted) VALUES (?, 'ana', 'old', ?, ?, ?, 0.5, 1)",
                (f"old-{i}", "user" if i % 2 else "assistant",
                 f"message {i} about rust, the deploy and my editor " * (i % 5 + 1),
                 f"2026-10-{i % 28 + 1:02d}T10:00:00Z"))
    writer.submit(seed)
    return connect_readonly(writer.path)


def test_layers_appear_in_the_system_prompt(rich_memory, config, recall):
    ctx = build_context(rich_memory, config, TokenCounter(), ContextRequest(
        "ana", "which editor do I use?", session_id="s", window=[fake_event(1, "hello")],
        bootstrap="I am Ana.", recall=recall))
    system = ctx.system_prompt
    assert "I am Ana." in system
    assert "attribute 0: value 0" in system
    assert "editor: uses helix, not vim" in system
    assert "Ana set up the staging server" in system
    assert ctx.messages[1] == {"role": "user", "content": "hello"}
    assert ctx.messages[-1] == {"role": "user", "content": "which editor do I use?"}
    facts = ctx.explain["facts"]
    assert facts[0]["why"] == "relevant" and facts[0]["ranks"]["bm25"] == 1


def test_facts_fall_back_to_most_recent_when_nothing_matches(rich_memory, config, recall):
    ctx = build_context(rich_memory, config, TokenCounter(), ContextRequest(
        "ana", "zzzz qqqq", session_id="s", window=[], recall=recall))
    assert len(ctx.explain["facts"]) == config.memory.facts_k
    assert all(f["why"] == "most recent (nothing matched)" for f in ctx.explain["facts"])


def test_tight_budget_drops_lower_priority_layers_first(rich_memory, config, recall):
    tight = with_ctx(config, 600, 200)
    ctx = build_context(rich_memory, tight, TokenCounter(), ContextRequest(
        "ana", "editor?", session_id="s", window=[fake_event(i, f"message {i}") for i in range(6)],
        bootstrap="I am Ana. " * 10, recall=recall))
    layers = {layer["name"]: layer["status"] for layer in ctx.explain["layers"]}
    assert layers["bootstrap"] == "included"
    assert layers["profile"] == "truncated"
    assert layers["diary"] == "dropped"
    assert ctx.tokens <= 400


def test_same_inputs_same_context(rich_memory, config, recall):
    args = dict(session_id="s", window=[fake_event(1, "hi")], bootstrap="I am Ana.")
    a = build_context(rich_memory, config, TokenCounter(), ContextRequest(
        "ana", "rust things", **args, recall=recall))
    b = build_context(rich_memory, config, TokenCounter(), ContextRequest(
        "ana", "rust things", **args, recall=recall))
    assert a.messages == b.messages and a.explain == b.explain


def test_another_users_memory_never_appears(rich_memory, config, recall):
    ctx = build_context(rich_memory, config, TokenCounter(), ContextRequest(
        "bob", "which editor do I use?", session_id="s", window=[], recall=recall))
    assert "helix" not in ctx.system_prompt and "attribute" not in ctx.system_prompt


@pytest.mark.parametrize("text", ['"unbalanced', "NEAR(a b)", "a AND OR NOT b", "col:val*",
                                  "^start (x", "🙂🙂", "", "x" * 10_000])
def test_fts_syntax_in_user_text_is_harmless(rich_memory, config, text, recall):
    ctx = build_context(rich_memory, config, TokenCounter(), ContextRequest(
        "ana", text, session_id="s", window=[], recall=recall))
    assert ctx.tokens <= ctx.budget


def count_independently(messages: list[dict], ratio: float) -> int:
    return sum(estimate_tokens(m["content"], ratio) + MESSAGE_OVERHEAD_TOKENS for m in messages)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    num_ctx=st.integers(512, 8192),
    reserve_share=st.floats(0.05, 0.9),
    bootstrap_len=st.integers(0, 20_000),
    window=st.lists(st.integers(0, 6_000), max_size=12),
    text_len=st.integers(0, 40_000),
    system_len=st.integers(0, 10_000),
    ratio=st.sampled_from([None, 1.0, 2.7, 6.0]),
    facts_k=st.integers(0, 12),
    cards_k=st.integers(0, 6),
)
def test_budget_is_never_exceeded(rich_memory, config, num_ctx, reserve_share, bootstrap_len,
                                  window, text_len, system_len, ratio, facts_k, cards_k, recall):
    reserve = max(64, min(num_ctx - 1, int(num_ctx * reserve_share)))
    cfg = with_ctx(config, num_ctx, reserve, facts_k=facts_k, cards_k=cards_k,
                   bootstrap_max_tokens=100_000)
    counter = TokenCounter()
    if ratio is not None:
        counter.observe(cfg.llm.chat_model, int(1000 * ratio), 1000)
    events = [fake_event(i, "word " * (n // 5)) for i, n in enumerate(window)]
    ctx = build_context(rich_memory, cfg, counter, ContextRequest(
        "ana", "rust deploy editor " * (text_len // 19), session_id="s", window=events,
        bootstrap="line of memory\n" * (bootstrap_len // 15),
        client_system="be brief. " * (system_len // 10) or None, recall=recall))
    budget = num_ctx - reserve
    assert ctx.budget == budget
    assert ctx.tokens <= budget
    assert count_independently(ctx.messages, counter.chars_per_token(cfg.llm.chat_model)) <= budget
    assert ctx.messages[0]["role"] == "system" and ctx.messages[-1]["role"] == "user"


def test_token_estimate_converges_on_the_servers_count():
    counter = TokenCounter()
    # The model's tokenizer gives 5 characters per token; our default guesses 3.5.
    for _ in range(15):
        counter.observe("m", 5000, 1000)
    assert counter.chars_per_token("m") == pytest.approx(5.0, rel=0.02)
    assert counter.chars_per_token("other") == pytest.approx(3.5)


def test_turn_calibrates_from_prompt_eval_count(fake_ollama, config, data_dir):
    from app.turn.chat import ChatService

    cfg = config.replace(llm={"url": fake_ollama.url})
    with ChatService(cfg) as service:
        for i in range(8):
            service.start_turn("ana", "s", f"tell me about topic number {i} " * 20).run()
        # The fake counts ceil(len / 4) tokens per message.
        assert service.tokens.chars_per_token(cfg.llm.chat_model) == pytest.approx(4.0, rel=0.1)


def test_window_drops_events_the_workers_compacted(fake_ollama, config, data_dir):
    from app.turn.chat import ChatService

    cfg = config.replace(llm={"url": fake_ollama.url})
    with ChatService(cfg) as service:
        for i in range(4):
            service.append("ana", "s", "user", f"message {i}")
        before = service.working.window(service.reader(), "ana", "s")
        assert [e.content for e in before] == [f"message {i}" for i in range(4)]
        # The worker compacts the oldest two (another connection, as in production).
        service.writer.submit(lambda con: con.execute(
            "UPDATE events SET compacted = 1 WHERE id IN (?, ?)", (before[0].id, before[1].id)))
        after = service.working.window(service.reader(), "ana", "s")
        assert [e.content for e in after] == ["message 2", "message 3"]


def test_model_down_keeps_the_users_message(config, data_dir):
    from app.model.errors import ModelUnreachable
    from app.turn.chat import ChatService
    from tests.fake_ollama import unused_loopback_url

    cfg = config.replace(llm={"url": unused_loopback_url()})
    with ChatService(cfg) as service:
        with pytest.raises(ModelUnreachable, match="ollama serve"):
            service.start_turn("ana", "s", "remember that I use helix")
        rows = service.reader().execute("SELECT role, content FROM events").fetchall()
    assert rows == [("user", "remember that I use helix")]


def test_raw_past_events_fill_in_when_compiled_layers_know_nothing(writer, config, recall):
    old = append_event(writer, config, "ana", "old", "user", "My dog is called Pixel")
    writer.submit(lambda con: con.execute("UPDATE events SET compacted = 1 WHERE id = ?",
                                          (old.id,)))
    con = connect_readonly(writer.path)
    ctx = build_context(con, config, TokenCounter(), ContextRequest(
        "ana", "what is my dog called?", session_id="new", window=[], recall=recall))
    assert "user: My dog is called Pixel" in ctx.system_prompt
    assert ctx.explain["events"][0]["id"] == old.id
    layers = {layer["name"]: layer["status"] for layer in ctx.explain["layers"]}
    assert layers["events"] == "included"


# -- past events: as many as fit, last in the prompt -----------------------------------------

def past_events(writer, config, count: int, session: str = "old", compacted: bool = True,
                more: str = ""):
    events = [append_event(writer, config, "ana", session, "user" if i % 2 else "assistant",
                           f"We talked about the garden project, part {i}{more}",
                           created_at=f"2026-09-{i % 28 + 1:02d}T10:{i // 28:02d}:00Z")
              for i in range(count)]
    if compacted:
        writer.submit(lambda con: con.execute(
            f"UPDATE events SET compacted = 1 WHERE session_id = '{session}'"))
    return events


def test_past_events_fill_the_room_the_compiled_layers_leave(writer, config, recall):
    config = config.replace(memory={"fill_first_message": True})
    events = past_events(writer, config, 120, more=": tomatoes, beans and a pond" * 8)
    writer.submit(lambda con: upsert_fact(con, "ana", "fact", "garden", "the garden project "
                                          "is a vegetable patch", source="user", worker="user"))
    con = connect_readonly(writer.path)
    ctx = build_context(con, config, TokenCounter(), ContextRequest(
        "ana", "how is the garden project going?", session_id="new", window=[], recall=recall))
    layers = {layer["name"]: layer for layer in ctx.explain["layers"]}
    assert layers["facts"]["status"] == "included"
    quoted = layers["events"]["items"]
    assert quoted > config.memory.cards_k and layers["events"]["status"] == "truncated"
    assert ctx.tokens <= ctx.budget
    # Nothing else would have fitted: the next line would overflow the budget.
    shown = {e["id"] for e in ctx.explain["events"]}
    left_out = [e for e in events if e.id not in shown]
    assert left_out and ctx.budget - ctx.tokens < estimate_tokens(
        f"- [2026-09-01] user: {left_out[0].content}\n") + 1


def test_retrieved_layers_close_the_system_prompt_and_stable_ones_open_it(rich_memory, config,
                                                                          recall):
    config = config.replace(memory={"fill_first_message": True})  # room for every layer
    ctx = build_context(rich_memory, config, TokenCounter(), ContextRequest(
        "ana", "rust deploy editor", session_id="s", window=[], bootstrap="I am Ana.",
        recall=recall))
    system = ctx.system_prompt
    order = [system.index(HEADERS[name]) for name in
             ("bootstrap", "profile", "diary", "facts", "cards", "events")]
    assert order == sorted(order)
    assert ctx.explain["events"], "past events were quoted"


def test_a_long_match_does_not_keep_out_the_shorter_ones_ranked_after_it(writer, config, recall):
    config = config.replace(memory={"retrieved_max_tokens": 120})
    short = [append_event(writer, config, "ana", "old", "user", text) for text in
             ("The pond is done", "Fish for the pond", "A pump for the pond")]
    long = append_event(writer, config, "ana", "old", "user",  # the best match, said last
                        "The koi pond pump: " + "the koi pond pump hums " * 40)
    writer.submit(lambda con: con.execute("UPDATE events SET compacted = 1"))
    con = connect_readonly(writer.path)
    ctx = build_context(con, config, TokenCounter(), ContextRequest(
        "ana", "the koi pond pump?", session_id="new", window=[], recall=recall))
    ranked = [e["id"] for e in ctx.explain["events"]]
    assert sorted(ranked) == sorted(e.id for e in short)  # what is quoted, and only that
    assert long.content not in ctx.system_prompt
    assert all(f"user: {e.content}" in ctx.system_prompt for e in short)
    layers = {layer["name"]: layer for layer in ctx.explain["layers"]}
    assert layers["events"]["items"] == 3 and layers["events"]["of"] == 4


def test_a_long_message_gives_the_sentence_that_answers_to_a_small_budget(writer, config,
                                                                         recall):
    config = config.replace(memory={"retrieved_max_tokens": 60})
    chatter = " ".join(f"Day {i} of the trip was grey and we mostly stayed in." for i in range(20))
    answer = "My sister Lucia moved to Porto in March."
    long = append_event(writer, config, "ana", "old", "user",
                        f"{chatter} {answer} She loves it there. {chatter}")
    writer.submit(lambda con: con.execute("UPDATE events SET compacted = 1"))
    con = connect_readonly(writer.path)
    ctx = build_context(con, config, TokenCounter(), ContextRequest(
        "ana", "where did my sister move to?", session_id="new", window=[], recall=recall))
    assert f"user: … {answer} She loves it there. …" in ctx.system_prompt
    assert "Day 3 of the trip" not in ctx.system_prompt
    assert ctx.explain["events"][0]["id"] == long.id
    assert ctx.explain["events"][0]["quoted"] == "2 of 42 sentences"


def test_a_found_long_message_is_told_by_its_answering_sentence_in_the_default_budget(
        writer, config, recall):
    chatter = " ".join(f"Day {i} of the trip was grey and we mostly stayed in." for i in range(30))
    answer = "My sister Lucia moved to Porto in March."
    long = append_event(writer, config, "ana", "old", "user",
                        f"{chatter} {answer} She loves it there. {chatter}")
    for i in range(6):
        append_event(writer, config, "ana", "old", "assistant", f"The weather on day {i} was fine.")
    writer.submit(lambda con: con.execute("UPDATE events SET compacted = 1"))
    con = connect_readonly(writer.path)
    ctx = build_context(con, config, TokenCounter(), ContextRequest(
        "ana", "where did my sister move to?", session_id="new", window=[], recall=recall))
    assert config.memory.retrieved_max_tokens == 300  # the default budget
    assert f"user: … {answer} She loves it there. …" in ctx.system_prompt
    assert ctx.explain["events"][0]["id"] == long.id
    assert ctx.explain["events"][0]["quoted"] == "2 of 62 sentences"


def test_a_message_too_long_for_the_room_left_is_quoted_in_part_not_skipped(writer, config,
                                                                            recall):
    config = config.replace(memory={"retrieved_max_tokens": 60})
    message = ("We walked for hours and the weather kept changing all afternoon long. "
               "The ferry to the island was cancelled. Then we ate at the harbour. "
               "Everyone was tired but happy and we slept early that night, because the "
               "next morning we had to be up at six to catch the first bus to the city.")
    append_event(writer, config, "ana", "old", "user", message)
    writer.submit(lambda con: con.execute("UPDATE events SET compacted = 1"))
    con = connect_readonly(writer.path)
    ctx = build_context(con, config, TokenCounter(), ContextRequest(
        "ana", "was the ferry cancelled?", session_id="new", window=[], recall=recall))
    assert ("user: … The ferry to the island was cancelled. Then we ate at the harbour. …"
            in ctx.system_prompt)
    assert ctx.explain["events"][0]["quoted"] == "2 of 4 sentences"


def test_quoted_events_are_shown_in_the_order_they_were_said(writer, config, recall):
    past_events(writer, config, 10)
    con = connect_readonly(writer.path)
    ctx = build_context(con, config, TokenCounter(), ContextRequest(
        "ana", "the garden project, part 7", session_id="new", window=[], recall=recall))
    lines = ctx.system_prompt.split(HEADERS["events"])[1].strip().splitlines()
    days = [line for line in lines if line.startswith("[")]
    said = [line for line in lines if not line.startswith("[")]
    # Under each day's date, once: the past messages run from oldest to newest.
    assert len(said) == 10 and days == sorted(days) and len(days) == len(set(days))
    parts = [int(line.split("part ")[1]) for line in said]
    assert parts == sorted(parts)
    assert ctx.explain["events"][0]["id"] != parts[0]  # ranked, not shown


def test_the_live_conversation_is_not_quoted_back(writer, config, recall):
    earlier = past_events(writer, config, 3, session="s", compacted=True)
    # Other words than the earlier ones: a quoted line the window repeats is left out.
    live = [append_event(writer, config, "ana", "s", "user", f"On with the garden, step {i}")
            for i in range(3)]
    asked = append_event(writer, config, "ana", "s", "user", "and the garden project?")
    con = connect_readonly(writer.path)
    ctx = build_context(con, config, TokenCounter(), ContextRequest(
        "ana", asked.content, session_id="s", window=live[-1:], recall=recall))
    quoted = {e["id"] for e in ctx.explain["events"]}
    assert quoted == {e.id for e in earlier}  # not the window, the rest of it, or the question


def test_deterministic_with_past_events(rich_memory, config, recall):
    args = dict(session_id="s", window=[fake_event(1, "hi")], bootstrap="I am Ana.", recall=recall)
    roomy = config.replace(memory={"retrieved_max_tokens": 100_000})  # many quoted events
    a = build_context(rich_memory, roomy, TokenCounter(), ContextRequest(
        "ana", "deploy editor", **args))
    b = build_context(rich_memory, roomy, TokenCounter(), ContextRequest(
        "ana", "deploy editor", **args))
    assert a.messages == b.messages and len(a.explain["events"]) > 2


def test_a_clients_history_gets_the_past_after_its_own_system_prompt(writer, config, recall):
    past_events(writer, config, 40, more=": tomatoes, beans and a pond" * 4)
    con = connect_readonly(writer.path)
    history = [{"role": "system", "content": "You are a gardening coach."},
               {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
               {"role": "user", "content": "how is the garden project going?"}]
    ctx = build_context(con, config, TokenCounter(), ContextRequest(
        "ana", history[-1]["content"], session_id="new", window=[], history=history, num_ctx=2048, recall=recall))
    system = ctx.messages[0]["content"]
    assert system.startswith("You are a gardening coach.") and HEADERS["events"] in system
    assert ctx.messages[1:] == history[1:]  # the client's messages, as sent
    layers = {layer["name"]: layer for layer in ctx.explain["layers"]}
    assert layers["events"]["status"] == "truncated" and ctx.tokens <= ctx.budget


# -- laid out for the prompt cache: stretches, notes, large steps ------------------------------

def said(i: int, content: str, role: str = "user") -> Event:
    return Event(id=i, uuid=f"u{i}", user_id="ana", session_id="s", role=role, content=content,
                 created_at="2026-11-30T10:00:00Z", importance=0.5)


def conversation(rich_memory, config, texts: list[str], counter: TokenCounter | None = None):
    """Build a session's turns one after the other, as ChatService does: each turn gets the
    previous turn's plan and the window since the stretch began, and they search through
    one Recall."""
    counter = counter or TokenCounter()
    recall = Recall()
    built, events, plan = [], [], None
    for n, text in enumerate(texts):
        start = plan.window_start if plan is not None else None
        window = [e for e in events if start is None or e.id >= start]
        ctx = build_context(rich_memory, config, counter, ContextRequest(
            "ana", text, session_id="s", window=window, plan=plan, message_id=2 * n + 1, recall=recall))
        built.append(ctx)
        plan = ctx.plan
        events += [said(2 * n + 1, text), said(2 * n + 2, f"answer {n}", "assistant")]
    return built


def test_a_sessions_next_prompt_starts_with_the_last_one_word_for_word(rich_memory, config):
    first, second, third = conversation(
        rich_memory, config, ["which editor do I use?", "and what about the deploy?",
                              "thanks, and rust?"])
    assert second.explain["stretch"]["turn"] == third.explain["stretch"]["turn"] == "continued"
    assert second.messages[:2] == first.messages  # the system prompt and the first message
    assert third.messages[:4] == second.messages  # the second message keeps its note
    assert [m["role"] for m in third.messages] == ["system", "user", "assistant", "user",
                                                   "assistant", "user"]


def test_memory_for_a_later_message_goes_just_before_it_bounded_and_never_twice(rich_memory,
                                                                                 config):
    config = config.replace(memory={"fill_first_message": False})  # leave room for notes
    first, second, third = conversation(
        rich_memory, config, ["which editor do I use?", "tell me about the deploy with docker",
                              "the deploy with docker again"])
    asked = second.messages[-1]["content"]
    assert asked.startswith("<memory>\n") and asked.endswith("tell me about the deploy with docker")
    note = asked.split("</memory>")[0]
    assert estimate_tokens(note, TokenCounter().chars_per_token(config.llm.chat_model)) <= (
        config.memory.retrieved_max_tokens + 10)
    noted = {f"{kind[:-1]}:{i}" for kind, ids in second.explain["note"].items() for i in ids}
    assert noted and not noted & first.plan.shown  # nothing the prompt already showed
    again = {f"{kind[:-1]}:{i}" for kind, ids in third.explain["note"].items() for i in ids}
    assert not again & noted


def test_a_message_with_nothing_new_to_recall_gets_no_note(rich_memory, config):
    *_, last = conversation(rich_memory, config, ["which editor do I use?", "zzzz qqqq"])
    assert last.messages[-1]["content"] == "zzzz qqqq"
    assert last.plan.notes == ()


def test_a_stretch_that_outgrows_the_budget_starts_again_in_one_large_step(rich_memory, config):
    # A first message that does not fill the budget: the first stretch has room to grow.
    tight = with_ctx(config, 2048, 512, fill_first_message=False)
    texts = [f"step {n} of the deploy: " + "details of the plan " * 12 for n in range(14)]
    built = conversation(rich_memory, tight, texts)
    restarts = [n for n, b in enumerate(built) if b.explain["stretch"]["turn"] == "new"]
    assert 3 <= len(restarts) <= len(built) // 2  # never at every turn
    for n, b in enumerate(built[1:], 1):
        if n in restarts:
            assert b.explain["stretch"]["why"] == "the conversation outgrew the budget"
        else:  # append-only between restarts
            assert b.messages[:len(built[n - 1].messages)] == built[n - 1].messages
    # Once the conversation is under way, a restart moves the window's start by several
    # turns at once.
    last = restarts[-1]
    assert built[last].explain["window"][0] - built[last - 1].explain["window"][0] >= 4
    assert all(b.tokens <= b.budget for b in built)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(num_ctx=st.integers(800, 6000), lengths=st.lists(st.integers(0, 3000), min_size=2,
                                                         max_size=14),
       retrieved=st.integers(0, 2000))
def test_the_budget_holds_over_a_whole_conversation(rich_memory, config, num_ctx, lengths,
                                                    retrieved):
    cfg = with_ctx(config, num_ctx, num_ctx // 4, retrieved_max_tokens=retrieved)
    counter = TokenCounter()
    for ctx in conversation(rich_memory, cfg, ["rust deploy editor " * (n // 19) for n in lengths],
                            counter):
        assert ctx.tokens <= ctx.budget
        assert count_independently(ctx.messages, counter.chars_per_token(cfg.llm.chat_model)) \
            <= ctx.budget


def test_the_same_plan_and_message_give_the_same_prompt(rich_memory, config, recall):
    first, second = conversation(rich_memory, config, ["which editor?", "and the deploy?"])
    window = [said(1, "which editor?"), said(2, "answer 0", "assistant")]
    again = build_context(rich_memory, config, TokenCounter(), ContextRequest(
        "ana", "and the deploy?", session_id="s", window=window, plan=first.plan, message_id=3, recall=recall))
    assert again.messages == second.messages and again.plan == second.plan


def test_another_system_prompt_or_budget_starts_a_new_stretch(rich_memory, config, recall):
    first, = conversation(rich_memory, config, ["which editor?"])
    window = [said(1, "which editor?"), said(2, "answer 0", "assistant")]
    for changed in ({"client_system": "Be terse."}, {"num_ctx": 2048}):
        ctx = build_context(rich_memory, config, TokenCounter(), ContextRequest(
            "ana", "and the deploy?", session_id="s", window=window, plan=first.plan, message_id=3,
            **changed, recall=recall))
        assert ctx.explain["stretch"] == {"turn": "new", "why": "the model, budget or system "
                                          "prompt changed"}


def test_a_clients_history_keeps_each_note_in_its_message(rich_memory, config, recall):
    config = config.replace(memory={"fill_first_message": False})
    history = [{"role": "system", "content": "Be brief."},
               {"role": "user", "content": "which editor do I use?"}]
    plan, built = None, []
    for n, text in enumerate(["tell me about the deploy with docker", "and rust?"]):
        ctx = build_context(rich_memory, config, TokenCounter(), ContextRequest(
            "ana", history[-1]["content"], session_id="s", window=[], history=list(history),
            plan=plan, show_window=False, recall=recall))
        built.append(ctx)
        plan = ctx.plan
        history += [{"role": "assistant", "content": f"answer {n}"}, {"role": "user", "content": text}]
    ctx = build_context(rich_memory, config, TokenCounter(), ContextRequest(
        "ana", history[-1]["content"], session_id="s", window=[], history=list(history), plan=plan,
        show_window=False, recall=recall))
    assert ctx.messages[:len(built[1].messages)] == built[1].messages
    assert ctx.messages[3]["content"].startswith("<memory>")  # where the client has it plain
    assert history[3]["content"] == "tell me about the deploy with docker"


def _first_message(writer, config, recall, speed: float | None, **memory):
    con = connect_readonly(writer.path)
    return build_context(con, config.replace(memory=memory), TokenCounter(), ContextRequest(
        "ana", "how is the garden project going?", session_id="new", window=[],
        recall=recall, prompt_speed=speed))


def test_a_first_message_gets_what_the_engine_reads_in_the_extra_time(writer, config, recall):
    past_events(writer, config, 120, more=": tomatoes, beans and a pond" * 3)
    # 300 tokens by default; an engine reading 200 tokens a second adds 200 in 1 s.
    default = _first_message(writer, config, recall, None)
    slow = _first_message(writer, config, recall, 10.0)
    fast = _first_message(writer, config, recall, 200.0, first_message_extra_seconds=1.0)
    gpu = _first_message(writer, config, recall, 50_000.0)
    filled = _first_message(writer, config, recall, None, fill_first_message="true")
    tokens = {name: next(layer["tokens"] for layer in ctx.explain["layers"]
                         if layer["name"] == "events")
              for name, ctx in (("default", default), ("slow", slow), ("fast", fast),
                                ("gpu", gpu), ("filled", filled))}
    assert tokens["default"] <= 300 and tokens["slow"] <= 310
    assert 300 < tokens["fast"] <= 500
    assert tokens["gpu"] == tokens["filled"] > 1000


def test_a_first_message_gets_the_default_when_told_so_whatever_the_speed(writer, config,
                                                                          recall):
    past_events(writer, config, 120, more=": tomatoes, beans and a pond" * 3)
    ctx = _first_message(writer, config, recall, 50_000.0, fill_first_message="false")
    assert next(layer["tokens"] for layer in ctx.explain["layers"]
                if layer["name"] == "events") <= 300
PLANTS = ["iris", "rush", "sedge", "mint", "fern", "lily", "reed", "moss", "flag", "cress"]


def test_ten_found_messages_are_all_told_within_the_default_budget(writer, config, recall):
    chatter = " ".join(f"On day {i} it rained and we stayed in." for i in range(14))
    answers = {}
    for i, plant in enumerate(PLANTS):
        answers[plant] = f"By the pond we planted {plant}."
        append_event(writer, config, "ana", "old", "user" if i % 2 else "assistant",
                     f"{chatter} {answers[plant]} It took the afternoon. Later the pond "
                     f"needed water for the {plant}. We used the rain barrel. {chatter}",
                     created_at=f"2026-09-{i + 1:02d}T10:00:00Z")
    writer.submit(lambda con: con.execute("UPDATE events SET compacted = 1"))
    con = connect_readonly(writer.path)
    ctx = build_context(con, config, TokenCounter(), ContextRequest(
        "ana", "what did we plant by the pond?", session_id="new", window=[], recall=recall))
    assert config.memory.retrieved_max_tokens == 300  # the default budget
    assert len(ctx.explain["events"]) == len(PLANTS)
    for answer in answers.values():
        assert answer in ctx.system_prompt
    assert {e.get("quoted") for e in ctx.explain["events"]} == {
        "4 of 32 sentences", "1 of 32 sentences"}
