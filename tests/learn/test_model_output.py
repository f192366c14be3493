"""The jobs' model output: the schema asked for, and the lenient validation of replies."""

from __future__ import annotations

import jsonschema
import pytest

from app.learn.compact import CARD_SCHEMA, parse_card
from app.learn.diary_entry import DIARY_SCHEMA, parse_entry
from app.learn.distill import DISTILL_SCHEMA, distill_schema, parse_extraction
from app.learn.model_output import InvalidOutput, output_limit

ANNOTATIONS = {"$ref", "$defs", "title", "description", "default", "examples"}


def _objects(schema: dict):
    """Every object schema inside `schema`, itself included."""
    if schema.get("type") == "object":
        yield schema
    for value in schema.values():
        for child in (value if isinstance(value, list) else [value]):
            if isinstance(child, dict):
                yield from _objects(child)


def _annotations(schema: dict) -> set[str]:
    found = set(schema) & ANNOTATIONS
    for value in schema.values():
        for child in (value if isinstance(value, list) else [value]):
            if isinstance(child, dict):
                found |= _annotations(child)
    return found


GOOD_ANSWERS = [
    (DISTILL_SCHEMA, {"profile": [{"key": "city", "value": "Madrid"}],
                      "facts": [{"category": "decision", "key": "db", "value": "use Postgres"}]},
     lambda raw: parse_extraction(raw).facts == [("decision", "db", "use Postgres")]),
    (CARD_SCHEMA, {"summary": "Moved the backups to S3.", "keywords": ["s3", "backups"]},
     lambda raw: parse_card(raw).keywords == "s3, backups"),
    (DIARY_SCHEMA, {"entry": "Planned the trip to Lisbon."},
     lambda raw: parse_entry(raw) == "Planned the trip to Lisbon."),
]


@pytest.mark.parametrize("schema", [DISTILL_SCHEMA, CARD_SCHEMA, DIARY_SCHEMA])
def test_a_schema_sent_is_what_llama_cpp_grammars_take(schema):
    """Inline (no $ref), without annotations, every field of every object required: a
    grammar built from it makes the model write every field."""
    assert _annotations(schema) == set()
    for obj in _objects(schema):
        assert set(obj.get("required", [])) == set(obj.get("properties", {})), obj


@pytest.mark.parametrize("schema, answer, parsed", GOOD_ANSWERS)
def test_an_answer_the_schema_allows_is_what_the_job_reads(schema, answer, parsed):
    jsonschema.validate(answer, schema)
    assert parsed(answer)


@pytest.mark.parametrize("schema, answer, _", GOOD_ANSWERS)
def test_the_schema_refuses_an_answer_missing_a_field(schema, answer, _):
    for field in answer:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({k: v for k, v in answer.items() if k != field}, schema)


def _unbounded(schema: dict, where: str = "") -> list[str]:
    """Where a list without maxItems or a string without maxLength is, inside `schema`."""
    found = []
    if schema.get("type") == "array" and "maxItems" not in schema:
        found.append(where or "/")
    if schema.get("type") == "string" and "maxLength" not in schema and "enum" not in schema:
        found.append(where or "/")
    for name, child in (schema.get("properties") or {}).items():
        found += _unbounded(child, f"{where}/{name}")
    if isinstance(schema.get("items"), dict):
        found += _unbounded(schema["items"], f"{where}[]")
    return found


@pytest.mark.parametrize("schema", [DISTILL_SCHEMA, CARD_SCHEMA, DIARY_SCHEMA])
def test_a_schema_sent_bounds_every_list_and_string(schema):
    """A grammar built from it ends: without bounds a small model loops inside the JSON
    until its context is full (issue 38: 16 minutes of one call)."""
    assert _unbounded(schema) == []
    assert output_limit(schema) is not None


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


def test_a_key_naming_the_answers_own_field_names_no_subject():
    # SmolLM2-135M on the learning bench stored `profile: The backend is Kotlin with Ktor`.
    extraction = parse_extraction({
        "profile": [{"key": "facts", "value": "Madrid"}, {"key": "city", "value": "Madrid"}],
        "facts": [{"category": "fact", "key": "Profile", "value": "backend is Kotlin with Ktor"}]})
    assert extraction.profile == {"city": "Madrid"}
    assert extraction.facts == [("fact", "backend kotlin ktor", "backend is Kotlin with Ktor")]


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
