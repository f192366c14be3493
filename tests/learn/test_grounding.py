"""What is stored is grounded in what was said: a learned item is kept only when one
source message supports it, that message is its provenance, and a model that returns
only junk leaves memory as rule-based learning would.

The messages and the model outputs here are development data written for these tests
(the issue's junk, `allergy: Mentos` and `ANA: My daughter Ana`, and its kind), never
LoCoMo's held-out conversations."""

from __future__ import annotations

import pytest

from app.learn.distill import (
    Extraction,
    TurnEvent,
    capture_turn,
    distill_turn,
    keep_grounded,
)
from tests.workers.support import add_turn, query

ANA = "My daughter Ana is allergic to peanuts."


def said(*lines: tuple[str, str]) -> list[TurnEvent]:
    return [TurnEvent(n, role, text) for n, (role, text) in enumerate(lines, 1)]


def judged(events: list[TurnEvent], *facts: tuple[str, str, str], profile=None):
    kept, dropped = keep_grounded(Extraction(profile=dict(profile or {}), facts=list(facts)),
                                  events)
    return kept, {(d.key, d.value): d.reason for d in dropped}


@pytest.mark.parametrize("key, value, reason", [
    ("allergy", "Mentos", "a name no message says"),  # invented
    ("allergy", "peanut butter cookies", "no message says it"),
    ("ANA", "My daughter Ana", "only the subject of what was said"),  # cut before the predicate
    ("editor", "staging database", "copied from Hilo's instructions"),  # the prompt's examples
    ("allergy", "allergic", "says nothing beyond its key"),
    ("daughter's allergy", "Ana is allergic to walnuts", "no message says it"),
    ("daughter", "Anna", "a name no message says"),  # a name must be said as it is
])
def test_an_item_no_message_supports_is_dropped_and_says_why(key, value, reason):
    kept, dropped = judged(said(("user", ANA), ("assistant", "Noted: no peanuts for Ana.")),
                           ("fact", key, value))
    assert kept.facts == [] and dropped == {(key, value): reason}


@pytest.mark.parametrize("key, value", [
    ("daughter's allergy", "Ana is allergic to peanuts"),
    ("daughter", "Ana"),
    ("daughter Ana", "allergic to peanuts"),
    ("allergies", "daughter allergic to peanuts"),
])
def test_an_item_its_message_says_is_kept_with_that_message(key, value):
    kept, dropped = judged(said(("user", "We moved to Lisbon last year."), ("user", ANA)),
                           ("fact", key, value))
    assert kept.facts == [("fact", key, value)] and dropped == {}
    assert kept.support == {("fact", key): 2}  # the message that says it, not the last one


def test_a_paraphrase_may_bring_one_word_in_four_that_no_message_says():
    events = said(("user", "Dead letters are kept 90 days, legal wants that."),
                  ("user", "Support, with a replay button. Engineering if replay fails twice."))
    kept, dropped = judged(events, ("fact", "dead letter retention", "90 days, required by legal"),
                           ("fact", "dead letter handling",
                            "support replays, engineering after two failed replays"),
                           ("fact", "retention", "90 days in cold storage"))
    assert [f[1] for f in kept.facts] == ["dead letter retention", "dead letter handling"]
    assert dropped == {("retention", "90 days in cold storage"): "no message says it"}


def test_numbers_must_be_said_exactly():
    events = said(("user", "My flight lands at 15:30 on Friday."))
    kept, dropped = judged(events, ("fact", "flight", "lands at 16:30 on Friday"),
                           ("fact", "landing", "lands 15:30 Friday"))
    assert [f[1] for f in kept.facts] == ["landing"]
    assert dropped == {("flight", "lands at 16:30 on Friday"): "no message says it"}


def test_what_only_the_assistant_said_is_not_the_users():
    events = said(("user", "Which editor would you suggest?"),
                  ("assistant", "You could try kakoune, many people like it."))
    kept, dropped = judged(events, ("preference", "editor", "uses kakoune"))
    assert kept.facts == [] and dropped == {("editor", "uses kakoune"): "only the assistant said it"}


def test_a_paraphrase_with_the_users_words_is_kept():
    events = said(("user", "Honestly I really like dark roast, the darker the better."))
    kept, _ = judged(events, ("preference", "coffee", "prefers dark roast coffee"),
                     profile={"favourite roast": "dark"})
    assert kept.facts == [("preference", "coffee", "prefers dark roast coffee")]
    assert kept.profile == {"favourite roast": "dark"}


def test_what_the_rules_find_is_kept_beside_what_the_model_said():
    events = said(("user", "My name is Dana and I use neovim as my editor."))
    kept, _ = judged(events, ("fact", "allergy", "Mentos"))  # junk, dropped
    assert kept.profile == {"name": "Dana"}
    assert [(c, v) for c, _, v in kept.facts] == [("preference", "uses neovim as my editor")]
    assert kept.by_rule == {("profile", "name"), ("preference", kept.facts[0][1])}
    # And the rules add nothing the model's kept items say already.
    kept, _ = judged(events, ("preference", "editor", "uses neovim"), profile={"name": "Dana"})
    assert kept.facts == [("preference", "editor", "uses neovim")] and kept.by_rule == set()


JUNK = [
    {"profile": {"ANA": "My daughter Ana"}, "facts": [
        {"category": "fact", "key": "allergy", "value": "Mentos"},
        {"category": "preference", "key": "editor", "value": "staging database"}]},
    {"profile": {}, "facts": [{"category": "fact", "key": "name", "value": "name"}]},
    {"profile": {}, "facts": []},
]


@pytest.mark.parametrize("junk", JUNK)
def test_a_model_that_returns_only_junk_leaves_memory_as_the_rules_would(job_parts, junk):
    cfg, writer, _, fake = job_parts
    lines = [ANA, "Please remember that the gym opens at 6 on Sundays.",
             "My name is Dana, and I prefer tea in the morning."]
    for user in ("model", "rules"):
        ids = [i for line in lines for i in add_turn(writer, cfg, user, "s1", line)]
        if user == "model":
            fake.script_generate(junk)
            distill_turn(writer, job_parts[2], cfg, user, "s1", ids)
        else:
            capture_turn(writer, cfg, user, "s1", ids)

    def memory(user):
        return (query(cfg, "SELECT category, key, value FROM facts WHERE user_id = ? ORDER BY key",
                      (user,)),
                query(cfg, "SELECT key, value FROM profile WHERE user_id = ?", (user,)))

    assert memory("model") == memory("rules") != ([], [])


def test_each_fact_names_the_message_that_supports_it(job_parts):
    cfg, writer, _, fake = job_parts
    first = add_turn(writer, cfg, "ana", "s1", ANA)
    second = add_turn(writer, cfg, "ana", "s1", "We are flying to Oslo on Friday.")
    fake.script_generate({"profile": {}, "facts": [
        {"category": "fact", "key": "daughter's allergy", "value": "Ana is allergic to peanuts"},
        {"category": "fact", "key": "trip", "value": "flying to Oslo on Friday"}]})
    distill_turn(writer, job_parts[2], cfg, "ana", "s1", first + second)
    assert query(cfg, "SELECT f.key, l.source_event_id FROM facts f JOIN memory_log l "
                      "ON l.owner_kind = 'fact' AND l.owner_id = f.id ORDER BY f.id") == [
        ("daughter's allergy", first[0]), ("trip", second[0])]
