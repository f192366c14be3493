"""The jobs' model output: the schema asked for, and the lenient validation of replies."""

from __future__ import annotations

import pytest

from app.learn.compact import CARD_SCHEMA, parse_card
from app.learn.diary_entry import DIARY_SCHEMA, parse_entry
from app.learn.distill import DISTILL_SCHEMA, distill_schema, parse_extraction
from app.learn.model_output import InvalidOutput, output_limit


def test_the_schemas_sent_ask_for_every_field_inline_bounded_and_without_annotations():
    # What llama.cpp's grammars take: no $ref, no titles, every field required; and every
    # list and string bounded, so a grammar-constrained reply ends (issue 38).
    text = {"type": "string", "maxLength": 160}
    assert DISTILL_SCHEMA == {
        "type": "object",
        "properties": {
            "profile": {"type": "array", "maxItems": 3, "items": {
                "type": "object",
                "properties": {"key": {"type": "string", "maxLength": 40}, "value": text},
                "required": ["key", "value"],
            }},
            "facts": {"type": "array", "maxItems": 6, "items": {
                "type": "object",
                "properties": {
                    "category": {"type": "string", "enum": ["fact", "decision", "solution",
                                                            "preference", "conversation"]},
                    "key": {"type": "string", "maxLength": 60},
                    "value": text,
                },
                "required": ["category", "key", "value"],
            }},
        },
        "required": ["profile", "facts"],
    }
    assert CARD_SCHEMA == {
        "type": "object",
        "properties": {"summary": {"type": "string", "maxLength": 400},
                       "keywords": {"type": "array", "maxItems": 8,
                                    "items": {"type": "string", "maxLength": 40}}},
        "required": ["summary", "keywords"],
    }
    assert DIARY_SCHEMA == {"type": "object",
                            "properties": {"entry": {"type": "string", "maxLength": 400}},
                            "required": ["entry"]}


def test_a_learning_call_asks_for_no_more_than_its_sources_can_hold():
    one, many = distill_schema(1), distill_schema(10)
    assert (one["properties"]["facts"]["maxItems"], one["properties"]["profile"]["maxItems"]) == (3, 2)
    assert (many["properties"]["facts"]["maxItems"], many["properties"]["profile"]["maxItems"]) == (6, 3)
    # The output limit is a reply at every bound, three characters a token.
    assert output_limit(one) < output_limit(many) < 1000
    assert output_limit(DIARY_SCHEMA) == -(-(2 + len('"entry"') + 4 + 402) // 3) + 16
    assert output_limit({"type": "object", "properties": {"x": {"type": "string"}}}) is None


def test_a_bad_fact_is_dropped_and_the_others_kept():
    extraction = parse_extraction({"facts": [
        "not an object",
        {"category": "gossip", "key": "x", "value": "y"},
        {"category": "fact", "key": "city", "value": "x" * 2001},
        {"category": "fact", "key": "home", "value": "lives in Madrid"},
    ]})
    assert extraction.facts == [("fact", "home", "lives in Madrid")]


def test_a_fact_without_a_usable_key_is_named_by_its_value():
    extraction = parse_extraction({"facts": [
        {"category": "solution", "value": "restart the staging nginx proxy"},
        {"category": "fact", "key": "unknown", "value": "backup runs at two"},
    ]})
    assert extraction.facts == [
        ("solution", "restart staging nginx proxy", "restart the staging nginx proxy"),
        ("fact", "backup runs two", "backup runs at two")]


def test_a_profile_given_as_a_list_of_pairs_is_read_and_odd_keys_skipped():
    extraction = parse_extraction({"profile": [
        {"key": "city", "value": "Madrid"}, {"key": ["not", "a", "key"], "value": "x"},
        {"key": "job", "value": "n/a"}, {"key": "age", "value": 41}]})
    assert extraction.profile == {"city": "Madrid", "age": "41"}


@pytest.mark.parametrize("raw, detail", [
    ("just text", "expected a JSON object"),
    ({"answer": 42}, "no profile or facts in the object"),
])
def test_output_that_is_not_an_extraction_says_why(raw, detail):
    with pytest.raises(InvalidOutput, match=detail):
        parse_extraction(raw, "the reply")


def test_keywords_may_come_as_one_string_and_are_capped():
    card = parse_card({"summary": "Moved the backups to S3.", "keywords": "s3, none, backups"})
    assert card.keywords == "s3, backups"
    many = parse_card({"summary": "s", "keywords": [f"k{n}" for n in range(20)] + [7]})
    assert many.keywords == ", ".join(f"k{n}" for n in range(8))
    assert parse_card({"summary": "s", "keywords": 7}).keywords == ""


@pytest.mark.parametrize("raw", [{"summary": "none", "keywords": ["a"]}, {"keywords": ["a"]},
                                 {"summary": "x" * 1001}])
def test_a_card_without_a_usable_summary_is_invalid(raw):
    with pytest.raises(InvalidOutput, match="no summary"):
        parse_card(raw, "the reply")


def test_a_diary_entry_is_cleaned_and_a_placeholder_is_invalid():
    assert parse_entry({"entry": "  Backups   moved to S3. "}) == "Backups moved to S3."
    with pytest.raises(InvalidOutput, match="no entry"):
        parse_entry({"entry": "N/A"}, "the reply")
