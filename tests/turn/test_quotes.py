"""Packing past messages: what a quoted block costs and how much of it fits."""

from __future__ import annotations

import apsw

from app.model.token_count import DEFAULT_CHARS_PER_TOKEN, estimate_tokens
from app.recall.sentences import WordsHeld
from app.turn.quotes import PastEvent, Quote, day_line, pack_quotes


def _quote(i: int, text: str, day: str = "2026-09-01") -> Quote:
    event = PastEvent(i, "old", f"{day}T10:00:0{i}Z", "user", text, compacted=True)
    return Quote(event, WordsHeld(apsw.Connection(":memory:"), "pond"))


def test_quotes_that_fit_as_one_block_are_all_told():
    # Each line is 18 characters: 6 tokens rounded up alone, 5.1 as part of the block.
    quotes = [_quote(i, f"pond {i} done") for i in range(4)]
    block = day_line("2026-09-01") + "\n" + "".join(q.line + "\n" for q in quotes)
    room = estimate_tokens(block)
    assert room < estimate_tokens(day_line("2026-09-01") + "\n") + sum(
        estimate_tokens(q.line + "\n") for q in quotes)  # what a count per line would say
    packed = pack_quotes(quotes, room, DEFAULT_CHARS_PER_TOKEN)
    assert packed.kept == [0, 1, 2, 3] and packed.tokens == room
    assert packed.text(quotes) == block


def test_a_quote_reads_as_its_speaker_and_words_under_its_day():
    quotes = [_quote(1, "The pond is done"), _quote(2, "Fish for the pond", "2026-09-03")]
    packed = pack_quotes(quotes, 100, DEFAULT_CHARS_PER_TOKEN)
    assert packed.text(quotes) == ("[2026-09-01]\nuser: The pond is done\n"
                                   "[2026-09-03]\nuser: Fish for the pond\n")


def test_a_long_quote_gives_way_to_short_ones_that_rank_nearly_as_well():
    from app.recall.fusion import Candidate
    from app.turn.quotes import LONG_QUOTE_CHARS, _by_room

    long = _quote(1, " ".join(["The pond pump hums all night."] * 40))  # cut at 500
    short = [_quote(i, f"The pond pump {i} is fixed") for i in (2, 3)]
    offer = [long, *short]
    scores = [0.10, 0.09, 0.08]  # the long one ranked first
    ranked = [Candidate("event", q.event.id, {"session": n + 1}, s)
              for n, (q, s) in enumerate(zip(offer, scores, strict=True))]
    assert len(long.line) > LONG_QUOTE_CHARS
    candidates, quotes = _by_room(ranked, offer)
    assert [q.event.id for q in quotes] == [2, 3, 1]
    assert [c.id for c in candidates] == [2, 3, 1]
    # Short quotes keep the fusion's order.
    _, same = _by_room(ranked[1:], short)
    assert same == short


def test_a_message_that_does_not_fit_is_told_by_its_answering_sentence_in_the_room_left():
    first = _quote(1, "The pond pump hums all night and we hear it from the kitchen window.")
    answer = "We dug the pond in May."
    second = _quote(2, f"It was a long spring. {answer} The fish came in June, twelve of them.")
    room = estimate_tokens(day_line("2026-09-01") + "\n" + first.line + "\n"
                           + f"user: … {answer} …\n")
    packed = pack_quotes([first, second], room, DEFAULT_CHARS_PER_TOKEN)
    assert packed.kept == [0, 1] and packed.shortened == {1: "sentence"}
    assert f"user: … {answer} …" in packed.text([first, second])
    assert second.explain("sentence") == {"quoted": "1 of 3 sentences"}


def test_a_sentence_quote_alters_nothing_the_user_wrote():
    said = "Sorry,   I was out!\nWe keep  the pond's fish (koi) in a tank - for winter? Yes."
    quote = _quote(1, said)
    assert quote.sentence == "user: … We keep the pond's fish (koi) in a tank - for winter? …"
    # Between the marks, the words as written: cut only where a sentence ends.
    shown = quote.sentence.removeprefix("user: … ").removesuffix(" …")
    assert shown in " ".join(said.split())


def test_a_message_none_of_whose_sentences_holds_a_word_has_no_answering_sentence():
    assert _quote(1, "We dug it in May. The fish came in June.").sentence is None
    assert _quote(2, "The pond is done.").sentence is None  # one sentence: whole or nothing
