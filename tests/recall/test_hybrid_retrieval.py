"""Hybrid retrieval: keywords, vectors, session neighbours, importance and recency fused
by weighted RRF.

The three-way test uses the deterministic ConceptEmbedder (paraphrases share a
dimension, names weigh little), so "vectors miss the name" holds by construction; the
paraphrase test also runs with the real local model when the extra is installed.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest

from app.db import connect_readonly
from app.events import append_event
from app.learn.embed import embed_pending
from app.memory import set_profile, upsert_fact
from app.recall.fusion import RRF_K, STREAMS, WEIGHTS, matching, search, search_ahead
from app.recall.query import make_query
from app.recall.streams import (
    asking_share,
    bm25_stream,
    session_neighbours,
    session_stream,
    vector_stream,
)
from app.recall.vectors import VectorIndex
from tests.embedding_fixtures import ConceptEmbedder

PUPPY = "I adopted a golden retriever puppy last weekend"
NAME = "Okonkwo fixed the flaky deploy pipeline before lunch"
OTHERS = [
    "My neighbour has two pets, a cat and a parrot",
    "The animal shelter downtown is looking for volunteers",
    "We cooked pasta for dinner on Friday",
    "The flight to Lisbon was delayed by two hours",
]


def seed(writer, config, embedder) -> dict[str, int]:
    ids = {text: append_event(writer, config, "ana", "s1", "user", text).id
           for text in [*OTHERS, NAME, PUPPY]}
    embed_pending(writer, embedder)
    return ids


def test_a_paraphrase_is_found_by_vectors_and_missed_by_keywords(writer, config, text_embedder,
                                                                  recall):
    ids = seed(writer, config, text_embedder)
    con = connect_readonly(writer.path)
    query = make_query("ana", "my dog", text_embedder, recall=recall)
    assert bm25_stream(con, query, "event", 10) == []
    assert ids[PUPPY] in vector_stream(con, query, "event", 10)[:2]


def test_vector_searches_started_ahead_rank_as_those_made_on_demand(writer, config, recall):
    # build_context starts them before the keyword streams, to run beside them.
    embedder = ConceptEmbedder()
    seed(writer, config, embedder)
    writer.submit(lambda con: [upsert_fact(con, "ana", "fact", key, value, source="user",
                                           worker="test")
                               for key, value in (("pet", "a golden retriever puppy"),
                                                  ("lunch", "pasta on Friday"))])
    embed_pending(writer, embedder)
    con = connect_readonly(writer.path)
    on_demand = make_query("ana", "my dog", embedder, recall=recall)
    ahead = make_query("ana", "my dog", embedder, recall=recall)
    search_ahead(con, ahead, {"event": 3, "fact": 2, "card": 0})
    for kind in ("event", "fact"):
        assert vector_stream(con, ahead, kind, 10) == vector_stream(con, on_demand, kind, 10) != []
    assert not ahead.vectors_ahead  # both were taken from the searches started ahead


class HeldEmbedder(ConceptEmbedder):
    """Embeds once released, as a model server still busy with the question."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def embed(self, texts):
        assert self.release.wait(30), "never released"
        return super().embed(texts)


class DownEmbedder(ConceptEmbedder):
    def embed(self, texts):
        raise ConnectionError("connection refused")


def test_a_question_embedded_ahead_leaves_the_keywords_free_and_ranks_as_one_embedded_at_once(
        writer, config, recall):
    # A turn embeds the question while the keyword streams run (ChatService._query).
    embedder = ConceptEmbedder()
    ids = seed(writer, config, embedder)
    con = connect_readonly(writer.path)
    held = HeldEmbedder()
    ahead = make_query("ana", "Did my dog meet Okonkwo?", held, ahead=True, recall=recall)
    search_ahead(con, ahead, {"event": 3})
    assert bm25_stream(con, ahead, "event", 10) == [ids[NAME]]  # while the embedder holds
    # Another turn's: not held up behind it.
    other = make_query("ana", "my dog", embedder, recall=recall)
    search_ahead(con, other, {"event": 3})
    assert ids[PUPPY] in vector_stream(con, other, "event", 10)[:2]
    assert not ahead.embedding.done()
    held.release.set()
    at_once = make_query("ana", "Did my dog meet Okonkwo?", embedder, recall=recall)
    assert vector_stream(con, ahead, "event", 10) == vector_stream(con, at_once, "event", 10)
    assert ids[PUPPY] in vector_stream(con, ahead, "event", 10)[:2]
    assert ([c.id for c in search(con, "ana", ahead.text, "event", 2, query=ahead)]
            == [c.id for c in search(con, "ana", at_once.text, "event", 2, query=at_once)])


def test_a_question_embedded_before_the_searches_start_ranks_as_one_embedded_at_once(
        writer, config, recall):
    embedder = ConceptEmbedder()
    ids = seed(writer, config, embedder)
    con = connect_readonly(writer.path)
    ahead = make_query("ana", "my dog", embedder, ahead=True, recall=recall)
    ahead.embedding.result()  # the model server answered before the turn searched
    search_ahead(con, ahead, {"event": 3})
    at_once = make_query("ana", "my dog", embedder, recall=recall)
    assert vector_stream(con, ahead, "event", 10) == vector_stream(con, at_once, "event", 10)
    assert ids[PUPPY] in vector_stream(con, ahead, "event", 10)[:2]


def test_a_question_whose_embedding_fails_ahead_is_answered_by_keywords(writer, config, recall):
    ids = seed(writer, config, ConceptEmbedder())
    con = connect_readonly(writer.path)
    query = make_query("ana", "Did my dog meet Okonkwo?", DownEmbedder(), ahead=True, recall=recall)
    search_ahead(con, query, {"event": 3})
    assert vector_stream(con, query, "event", 10) == []
    assert ids[NAME] in [c.id for c in search(con, "ana", query.text, "event", 2, query=query)]


def test_a_search_and_its_evidence_check_read_the_vectors_once(writer, config, monkeypatch, recall):
    # A turn's note searches each kind, then keeps what has evidence (`matching`): the
    # cosines it checks are those the vector stream found, not a second search.
    embedder = ConceptEmbedder()
    ids = seed(writer, config, embedder)
    con = connect_readonly(writer.path)
    searched = []
    search_index = VectorIndex.nearest
    monkeypatch.setattr(VectorIndex, "nearest", lambda self, *args: searched.append(args[3])
                        or search_index(self, *args))
    query = make_query("ana", "my dog", embedder, recall=recall)
    found = search(con, "ana", query.text, "event", 3, query=query)
    assert ids[PUPPY] in [c.id for c in matching(con, query, "event", found)]
    # Events once; facts and cards (the learned stream reads them) once each as well.
    assert sorted(searched) == ["card", "event", "fact"]


def test_an_exact_name_is_found_by_keywords_and_missed_by_vectors(writer, config, recall):
    embedder = ConceptEmbedder()
    ids = seed(writer, config, embedder)
    con = connect_readonly(writer.path)
    query = make_query("ana", "Did my dog meet Okonkwo?", embedder, recall=recall)
    assert bm25_stream(con, query, "event", 10) == [ids[NAME]]
    assert ids[NAME] not in vector_stream(con, query, "event", 10)[:3]


def test_the_fusion_finds_both_the_paraphrase_and_the_name(writer, config, recall):
    embedder = ConceptEmbedder()
    ids = seed(writer, config, embedder)
    con = connect_readonly(writer.path)
    top = search(con, "ana", "Did my dog meet Okonkwo?", "event", 2, recall=recall,
                 embedder=embedder)
    assert {c.id for c in top} == {ids[PUPPY], ids[NAME]}


def test_explain_gives_every_stream_rank_and_a_score_consistent_with_the_order(writer, config,
                                                                              recall):
    embedder = ConceptEmbedder()
    seed(writer, config, embedder)
    con = connect_readonly(writer.path)
    query = make_query("ana", "Did my dog meet Okonkwo?", embedder, recall=recall)
    streams = {name: stream(con, query, "event", 50) for name, stream in STREAMS.items()}
    candidates = search(con, "ana", query.text, "event", 10, query=query)
    assert candidates
    for c in candidates:
        explained = c.explain()
        expected_ranks = {name: ids.index(c.id) + 1 for name, ids in streams.items() if c.id in ids}
        assert explained["ranks"] == expected_ranks
        expected = sum(WEIGHTS[s] / (RRF_K + r) for s, r in expected_ranks.items())
        assert explained["score"] == round(expected, 6)
    scores = [c.score for c in candidates]
    assert scores == sorted(scores, reverse=True)
    assert len({c.id for c in candidates}) == len(candidates)  # deduplicated


def test_priors_rerank_but_do_not_answer_a_query_nothing_matches(writer, config, recall):
    seed(writer, config, ConceptEmbedder())
    con = connect_readonly(writer.path)
    # No embedder, no keyword in common: nothing matched, so callers fall back to recent.
    assert search(con, "ana", "xylophone", "event", 5, recall=recall) == []
    everything = search(con, "ana", "xylophone", "event", 5, require_match=False, recall=recall)
    assert [c.ranks.keys() for c in everything][0] == {"recency"}


def test_important_events_rank_higher_among_equal_matches(writer, config, recall):
    low = append_event(writer, config, "ana", "s1", "user", "the server password rotates monthly")
    high = append_event(writer, config, "ana", "s1", "user", "the server password rotates weekly",
                        importance=0.9)
    later = append_event(writer, config, "ana", "s1", "user", "the server password rotates daily")
    con = connect_readonly(writer.path)
    top = search(con, "ana", "server password", "event", 3, recall=recall)
    assert top[0].id == high.id and "importance" in top[0].ranks
    assert {c.id for c in top} == {low.id, high.id, later.id}


# -- the session stream ------------------------------------------------------------------

CHAT = [
    ("s1", "user", "We spent the weekend repainting the kitchen"),
    ("s1", "user", "Guess what, we finally got a puppy from the shelter!"),
    ("s1", "assistant", "Congratulations! What's the puppy called?"),
    ("s1", "user", "We call him Biscuit, after his colour"),
    ("s1", "assistant", "That suits a golden retriever"),
    ("s2", "user", "Biscuit chewed my left shoe this morning"),
]


def chat(writer, config) -> list[int]:
    return [append_event(writer, config, "ana", session, role, text).id
            for session, role, text in CHAT]


def test_the_session_stream_finds_the_reply_next_to_the_matching_question(writer, config, recall):
    ids = chat(writer, config)
    con = connect_readonly(writer.path)
    # No vectors: keywords only.
    query = make_query("ana", "what is the puppy's name?", recall=recall)
    assert set(bm25_stream(con, query, "event", 10)) == {ids[1], ids[2]}  # "puppy"
    found = session_stream(con, query, "event", 10)
    assert ids[3] in found[:3]  # "We call him Biscuit": no word of the query
    assert ids[5] not in found  # another session
    top = search(con, "ana", query.text, "event", 3, query=query)
    assert ids[3] in {c.id for c in top} and "session" in top[0].ranks


def test_session_neighbours_stay_in_the_session_and_include_compacted_events(writer, config):
    a1 = append_event(writer, config, "ana", "s1", "user", "one").id
    b1 = append_event(writer, config, "ana", "s2", "user", "other session").id
    a2 = append_event(writer, config, "ana", "s1", "assistant", "two").id
    append_event(writer, config, "bob", "s1", "user", "another user, same session id")
    a3 = append_event(writer, config, "ana", "s1", "user", "three").id
    a4 = append_event(writer, config, "ana", "s1", "assistant", "four").id
    a5 = append_event(writer, config, "ana", "s1", "user", "five").id
    writer.submit(lambda con: con.execute("UPDATE events SET compacted = 1 WHERE id IN (?, ?)",
                                          (a1, a4)))
    con = connect_readonly(writer.path)
    found = session_neighbours(con, "ana", [a3, a1, b1, a5], 2)
    assert found[a3] == ([a2, a1], [a4, a5])
    assert found[a1] == ([], [a2, a3])
    assert found[a5] == ([a4, a3], [])
    assert found[b1] == ([], [])
    assert session_neighbours(con, "bob", [a3], 2) == {}  # not bob's event
    assert session_neighbours(con, "ana", [a3], 1) == {a3: ([a2], [a4])}


def test_a_message_stored_or_forgotten_changes_its_neighbours_at_the_next_lookup(writer,
                                                                                 config):
    said = [append_event(writer, config, "ana", "s1", "user", t).id for t in ("a", "b", "c")]
    con = connect_readonly(writer.path)
    assert session_neighbours(con, "ana", [said[2]], 2) == {said[2]: ([said[1], said[0]], [])}
    later = append_event(writer, config, "ana", "s1", "assistant", "d").id
    writer.submit(lambda con: con.execute("DELETE FROM events WHERE id = ?", (said[1],)))
    assert session_neighbours(con, "ana", [said[2]], 2) == {said[2]: ([said[0]], [later])}


def test_each_neighbour_is_one_index_seek(writer, config):
    said = append_event(writer, config, "ana", "s1", "user", "one").id
    con = connect_readonly(writer.path)
    asked = []
    con.exec_trace = lambda cursor, sql, bindings: asked.append((sql, bindings)) or True
    session_neighbours(con, "ana", [said], 2)
    con.exec_trace = None
    [(sql, bindings)] = asked
    plan = [row[-1] for row in con.execute("EXPLAIN QUERY PLAN " + sql, bindings)]
    seeks = [step for step in plan if step.startswith("SEARCH n ")]
    assert len(seeks) == 4 and all("COVERING INDEX events_in_session" in s for s in seeks)
    assert not any("TEMP B-TREE" in step for step in plan)


def test_the_session_stream_ranks_facts_by_their_text_evidence_alone(writer, config, recall):
    chat(writer, config)
    for key, value in (("pet", "a puppy called Biscuit"), ("editor", "helix"),
                       ("pet food", "puppy kibble, grain free")):
        writer.submit(lambda con, k=key, v=value: upsert_fact(
            con, "ana", "preference", k, v, source="user", worker="user"))
    con = connect_readonly(writer.path)
    assert session_stream(con, make_query("ana", "xylophone", recall=recall), "event", 10) == []
    query = make_query("ana", "puppy food", recall=recall)
    found = session_stream(con, query, "fact", 10)
    assert len(found) == 2 and found == bm25_stream(con, query, "fact", 10)
    assert session_stream(con, query, "card", 10) == []


def test_one_strong_match_outranks_an_event_between_weak_ones(writer, config, recall):
    # The stronger neighbour counts, not the sum: a turn flanked by weak matches must not
    # pass the turn next to the strong one.
    texts = ["dog", "filler one", "dog", "filler two", "dog",
             "filler three", "filler four", "dog dog dog walk park", "filler five"]
    ids = [append_event(writer, config, "ana", "s1", "user", t).id for t in texts]
    con = connect_readonly(writer.path)
    found = session_stream(con, make_query("ana", "dog walk park", recall=recall), "event", 10)
    assert found.index(ids[8]) < found.index(ids[3])


def test_a_message_that_tells_outranks_one_that_asks_with_the_same_words(writer, config, recall):
    asked = append_event(writer, config, "ana", "s1", "user", "What's your best camping memory?").id
    told = append_event(writer, config, "ana", "s2", "assistant",
                        "My best camping memory is the meteor shower we watched at the lake.").id
    con = connect_readonly(writer.path)
    query = make_query("ana", "best camping memory", recall=recall)
    assert bm25_stream(con, query, "event", 10) == [asked, told]  # the shorter matches better
    assert session_stream(con, query, "event", 10)[:2] == [told, asked]


def test_the_session_stream_read_shallow_then_deep_ranks_as_read_deep_at_once(writer, config,
                                                                              recall):
    # Ranked once per query for every depth: the first 3 are the first 3 of the 10.
    ids = chat(writer, config)
    con = connect_readonly(writer.path)
    shallow_first = make_query("ana", "what is the puppy's name?", recall=recall)
    assert session_stream(con, shallow_first, "event", 2) == session_stream(
        con, make_query("ana", "what is the puppy's name?", recall=recall), "event", 10)[:2]
    assert session_stream(con, shallow_first, "event", 10) == session_stream(
        con, make_query("ana", "what is the puppy's name?", recall=recall), "event", 10)
    assert ids[3] in session_stream(con, shallow_first, "event", 10)


def test_a_message_stored_after_a_search_is_found_by_the_next_one(writer, config, recall):
    # What a search keeps from one question to the next (the asking shares, kept by text)
    # never hides what memory holds now.
    chat(writer, config)
    con = connect_readonly(writer.path)
    question = "when is the vet appointment?"
    assert session_stream(con, make_query("ana", question, recall=recall), "event", 10) == []
    said = append_event(writer, config, "ana", "s3", "user",
                        "The vet appointment is on Tuesday. Can you remind me?").id
    found = session_stream(con, make_query("ana", question, recall=recall), "event", 10)
    assert found[0] == said


@pytest.mark.parametrize(("text", "share"), [
    ("What's your name?", 1.0), ("I moved here. Do you like it?", 0.5),
    ("Great news! We got a puppy.", 0.0), ("", 0.0), ("¿Qué tal?", 1.0),
    ("We moved. " * 300 + "Do you like it?", 1 / 301)])  # longer than the cache keeps
def test_the_share_of_a_message_that_asks(text, share):
    assert asking_share(text) == share


# -- reading the question: the user's name, common words, times ------------------------------

def conversation(writer, config, turns: list[tuple[str, str, str]]) -> list[int]:
    """(role, text, created_at) turns in one session."""
    return [append_event(writer, config, "ana", "s1", role, text, created_at=when).id
            for role, text, when in turns]


def name_the_user(writer, name: str) -> None:
    writer.submit(lambda con: set_profile(con, "ana", "name", name, source="user",
                                          worker="user"))


def test_a_question_naming_the_user_finds_what_the_user_said(writer, config, recall):
    name_the_user(writer, "Caroline")
    ids = conversation(writer, config, [
        ("assistant", "Hey Caroline! How is the adoption research going?", "2023-05-01T10:00:00Z"),
        ("user", "I've been looking into adoption agencies all week", "2023-05-01T10:01:00Z"),
        ("assistant", "Caroline, that's wonderful research!", "2023-05-01T10:02:00Z"),
    ])
    con = connect_readonly(writer.path)
    query = make_query("ana", "What research did Caroline do?", con=con, recall=recall)
    assert query.searched == "What research did do?"
    assert query.labels is not None and query.labels.role == "user"
    top = search(con, "ana", query.text, "event", 3, query=query)
    assert top[0].id == ids[1] and "labels" in top[0].ranks


def test_a_name_in_a_large_share_of_the_memory_is_not_searched_for(writer, config, recall):
    turns = [("user", f"Thanks, Mel! Talk soon about item {i}", f"2023-05-01T10:{i:02d}:00Z")
             for i in range(60)]
    turns.append(("assistant", "I painted a sunset over the lake", "2023-05-02T10:00:00Z"))
    ids = conversation(writer, config, turns)
    con = connect_readonly(writer.path)
    query = make_query("ana", "What did Mel paint?", con=con, recall=recall)
    assert query.searched == "What did paint?"
    assert search(con, "ana", query.text, "event", 1, query=query)[0].id == ids[-1]
    # A question of common words only keeps them: better those than nothing.
    assert make_query("ana", "Thanks Mel", con=con, recall=recall).searched == "Thanks Mel"


def test_the_query_embeds_the_words_it_searches_for(writer, config, recall):
    name_the_user(writer, "Caroline")

    class Recording(ConceptEmbedder):
        def embed(self, texts):
            self.seen = list(texts)
            return super().embed(texts)

    embedder = Recording()
    con = connect_readonly(writer.path)
    make_query("ana", "Where did Caroline adopt her dog?", embedder, con=con, recall=recall)
    assert embedder.seen == ["Where did adopt her dog?"]


def test_a_question_naming_a_month_prefers_that_months_events(writer, config, recall):
    ids = conversation(writer, config, [
        ("user", "We went camping by the river", "2023-06-10T10:00:00Z"),
        ("user", "We went camping in the mountains", "2023-07-15T10:00:00Z"),
    ])
    con = connect_readonly(writer.path)
    july = search(con, "ana", "Where did we go camping in July?", "event", 2, recall=recall)
    june = search(con, "ana", "Where did we go camping in June?", "event", 2, recall=recall)
    assert july[0].id == ids[1] and june[0].id == ids[0]


def test_a_question_with_only_a_time_finds_the_events_of_that_time(writer, config, recall):
    ids = conversation(writer, config, [
        ("user", "Booked the flights to Lisbon", "2023-04-28T10:00:00Z"),
        ("user", "Started the pottery class", "2023-05-03T18:00:00Z"),
        ("assistant", "Enjoy the class!", "2023-05-03T18:01:00Z"),
        ("user", "Finished the quarterly report", "2023-06-01T09:00:00Z"),
    ])
    con = connect_readonly(writer.path)
    found = search(con, "ana", "¿Qué hice en mayo?", "event", 5, recall=recall)
    assert [c.id for c in found] == [ids[2], ids[1]]  # newest first
    assert search(con, "ana", "What happened in August?", "event", 5, recall=recall) == []


def test_relative_times_count_from_when_the_question_is_asked(writer, config, recall):
    ids = conversation(writer, config, [
        ("user", "Had dinner at the Thai place", "2023-10-18T19:00:00Z"),
        ("user", "Had dinner with my sister", "2023-10-19T19:00:00Z"),
    ])
    con = connect_readonly(writer.path)
    asked = datetime(2023, 10, 20, 12, tzinfo=UTC)
    query = make_query("ana", "Where did I have dinner yesterday?", recall=recall, con=con,
                       now=asked)
    assert search(con, "ana", query.text, "event", 2, query=query)[0].id == ids[1]


def test_a_numeric_date_finds_the_events_of_that_day(writer, config, recall):
    ids = conversation(writer, config, [
        ("user", "Went to the dentist, then the pottery class", "2024-01-21T10:00:00Z"),
        ("user", "Painted the kitchen walls", "2024-01-22T10:00:00Z"),
        ("user", "Read a novel all afternoon", "2024-06-21T10:00:00Z"),
    ])
    con = connect_readonly(writer.path)
    found = search(con, "ana", "What did I do on 21.01.2024?", "event", 3, recall=recall)
    assert [c.id for c in found] == [ids[0]]


def test_the_users_locale_decides_how_a_numeric_date_is_read(writer, config, recall):
    ids = conversation(writer, config, [
        ("user", "Planted the tomatoes", "2023-04-03T10:00:00Z"),
        ("user", "Planted the basil", "2023-03-04T10:00:00Z"),
    ])
    con = connect_readonly(writer.path)
    question = "What did I plant on 03/04/2023?"
    assert search(con, "ana", question, "event", 1, recall=recall)[0].id == ids[0]
    writer.submit(lambda c: set_profile(c, "ana", "locale", "en-US", source="user",
                                        worker="user"))
    assert search(con, "ana", question, "event", 1, recall=recall)[0].id == ids[1]


def test_a_question_naming_the_assistant_finds_what_the_assistant_said(writer, config, recall):
    # The user calls the assistant Mel; the assistant never writes that name.
    turns = [("user", f"Thanks, Mel! Talk soon about item {i}", f"2023-05-01T10:{i:02d}:00Z")
             for i in range(60)]
    turns += [("user", "I painted the fence, painted it twice", "2023-05-02T10:00:00Z"),
              ("assistant", "I painted a sunset over the lake last year",
               "2023-05-02T10:01:00Z")]
    ids = conversation(writer, config, turns)
    con = connect_readonly(writer.path)
    query = make_query("ana", "What did Mel paint?", con=con, recall=recall)
    assert query.labels is not None and query.labels.role == "assistant"
    assert search(con, "ana", query.text, "event", 1, query=query)[0].id == ids[-1]


def test_someone_the_user_only_talks_about_is_not_taken_for_the_assistant(writer, config,
                                                                         recall):
    conversation(writer, config, [
        ("user", f"Anna loved the cake I made, number {i}", f"2023-05-01T10:{i:02d}:00Z")
        for i in range(60)])
    con = connect_readonly(writer.path)
    query = make_query("ana", "What did Anna bake?", con=con, recall=recall)
    assert query.labels is None or query.labels.role is None


def test_a_question_naming_both_speakers_is_about_the_one_named_first(writer, config, recall):
    # The user (Caroline) calls the assistant Mel; "What did Mel tell Caroline?" asks
    # for Mel's words, "What do Mel and Caroline both like?" for either's.
    name_the_user(writer, "Caroline")
    turns = [("user", f"Thanks, Mel! Talk soon about item {i}", f"2023-05-01T10:{i:02d}:00Z")
             for i in range(60)]
    turns += [("user", "The garden, oh the garden: the garden needs roses, lots of roses",
               "2023-05-02T10:00:00Z"),
              ("assistant", "Your garden could use a pond", "2023-05-02T10:01:00Z")]
    ids = conversation(writer, config, turns)
    con = connect_readonly(writer.path)
    query = make_query("ana", "What did Mel tell Caroline about the garden?", con=con,
                       recall=recall)
    assert query.labels is not None and query.labels.role == "assistant"
    assert search(con, "ana", query.text, "event", 1, query=query)[0].id == ids[-1]
    about_caroline = make_query("ana", "What does Caroline think of Mel's garden?", con=con,
                                recall=recall)
    assert about_caroline.labels is not None and about_caroline.labels.role == "user"
    both = make_query("ana", "What do Mel and Caroline both like in the garden?", con=con,
                      recall=recall)
    assert both.labels is None or both.labels.role is None
