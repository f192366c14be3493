"""Asking the model for JSON and judging what comes back.

Each job's output is a pydantic model below. The JSON schema sent with the request
(Ollama's `format`) is generated from it by `format_schema()`: every field asked for,
inlined and without annotations, as llama.cpp's grammars take it, and bounded — each
list has a `maxItems`, each string a `maxLength` — so a grammar-constrained reply ends:
without bounds, a small model loops inside the JSON until its context is full (issue 38:
16 minutes; bounded, the same model ended in 1.4–2.3 s). The call's output limit is
derived from the same bounds (`output_limit`). Validation is lenient
where local models are sloppy: the outermost JSON value is taken from prose
(parse_json_leniently, below), placeholder values ("none", "unknown", …) and over-long
ones are dropped, a bad item is dropped rather than the whole output, and only output
with nothing usable raises InvalidOutput, which the task wrappers retry like a model
error and then degrade — never a silent loss.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Hashable, Mapping
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
    WrapValidator,
    model_validator,
)

from app.errors import HiloError
from app.fts import terms
from app.memory import CATEGORIES
from app.model.client import ModelClient
from app.model.replies import SentChat

__all__ = ["PLACEHOLDERS", "FIELD_NAMES", "EXCERPT_CHARS", "PROFILE_KEY_CHARS", "FACT_KEY_CHARS", "VALUE_CHARS",
           "SUMMARY_CHARS", "KEYWORD_CHARS", "ENTRY_CHARS", "MAX_KEYWORDS", "MAX_FACTS",
           "MAX_PROFILE", "FACTS_PER_SOURCE", "PROFILE_PER_SOURCE", "KEY_WORDS", "CHARS_PER_TOKEN",
           "LIMIT_SLACK_TOKENS", "InvalidOutput", "clean_text", "ModelOutput", "Category",
           "ProfileKey", "Value", "FactKey", "Keyword", "PROFILE_PAIRS", "Keywords",
           "DistilledFact", "DistillOutput", "items_for", "CardOutput", "ChunkOutput",
           "DiaryOutput", "Output", "parse_output", "ask_json", "output_limit",
           "parse_json_leniently"]

# Values a model writes when it has nothing to say; never stored.
PLACEHOLDERS = frozenset({
    "", "none", "unknown", "n/a", "na", "null", "nil", "-", "—", "?", "not specified",
    "not mentioned", "not provided", "no", "desconocido", "ninguno", "ninguna", "nada",
})
# The answer's own field names: a weak model writes them as a key ("profile: The backend is
# Kotlin…"), which names no subject, so no later value under the subject's key replaces it.
FIELD_NAMES = frozenset({
    "profile", "facts", "fact", "key", "value", "category", "summary", "keywords", "entry",
})
EXCERPT_CHARS = 200
# The bounds of the schemas sent; longer values are not what was asked for: dropped, not
# cut. A fact's value is a phrase ("uses vim for Python"), a summary or an entry one or
# two sentences.
PROFILE_KEY_CHARS = 40
FACT_KEY_CHARS = 60
VALUE_CHARS = 160
SUMMARY_CHARS = 400
KEYWORD_CHARS = 40
ENTRY_CHARS = 400
MAX_KEYWORDS = 8
MAX_FACTS = 6  # per call; fewer for fewer source messages (items_for)
MAX_PROFILE = 3
FACTS_PER_SOURCE = 3
PROFILE_PER_SOURCE = 2
# A fact without a usable key is named by this many words of its value.
KEY_WORDS = 4
# Tokens of the output limit per character the bounded schema allows: JSON text runs at
# three to four characters a token, so a whole reply at every bound still fits.
CHARS_PER_TOKEN = 3
LIMIT_SLACK_TOKENS = 16


class InvalidOutput(HiloError, ValueError):
    """The model answered, but with nothing usable; worth asking again."""

    retryable = True

    def __init__(self, job: str, detail: str, text: str) -> None:
        super().__init__(f"the model's {job} output is not usable ({detail}): "
                         f"{text[:EXCERPT_CHARS]!r}")
        self.text = text


def clean_text(value: Any, max_chars: int) -> str | None:
    """One line of text, or None for placeholders, non-text and over-long values."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        value = str(value)
    if not isinstance(value, str):
        return None
    text = " ".join(value.split())
    if text.casefold().strip(" .") in PLACEHOLDERS or len(text) > max_chars:
        return None
    return text


# -- lenient building blocks -----------------------------------------------------------------


def _subject_key(value: Any, max_chars: int) -> str | None:
    """A key cleaned by clean_text, or None when it only names one of the answer's fields."""
    key = clean_text(value, max_chars)
    return None if key is None or key.casefold() in FIELD_NAMES else key


def _cleaned(max_chars: int) -> BeforeValidator:
    """Text cleaned by clean_text; what it refuses fails validation as not a string."""
    return BeforeValidator(lambda value: clean_text(value, max_chars))


def _valid_items(value: Any, handler: ValidatorFunctionWrapHandler) -> list:
    """The list's valid items, each validated alone; one object counts as a list of
    one, anything else as an empty list."""
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        return []
    kept: list = []
    for item in value:
        try:
            kept.extend(handler([item]))
        except ValidationError:
            continue
    return kept


def _valid_entries(value: Any, handler: ValidatorFunctionWrapHandler) -> dict:
    """The mapping's valid entries, each validated alone; a list of {"key", "value"}
    objects counts as a mapping, anything else as an empty one."""
    if isinstance(value, list):  # a later entry for a key replaces an earlier one
        value = {p.get("key"): p.get("value") for p in value
                 if isinstance(p, dict) and isinstance(p.get("key"), Hashable)}
    if not isinstance(value, dict):
        return {}
    kept: dict = {}
    for key, item in value.items():
        try:
            kept.update(handler({key: item}))
        except ValidationError:
            continue
    return kept


def _comma_separated(value: Any) -> Any:
    return value.split(",") if isinstance(value, str) else value


def _category(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    category = value.strip().casefold()
    if category not in CATEGORIES and category.rstrip("s") in CATEGORIES:
        category = category.rstrip("s")  # "preferences", "facts"
    return category


# The schema asks for every field; validation also takes output that lacks some.
_EVERY_FIELD_ASKED = ConfigDict(json_schema_serialization_defaults_required=True)


class ModelOutput(BaseModel):
    """A job's output: asked for in full (`format_schema`), validated leniently."""

    model_config = _EVERY_FIELD_ASKED

    @classmethod
    def format_schema(cls, items: Mapping[str, int] | None = None) -> dict[str, Any]:
        """The JSON schema to send as `format`: the complete output, refs inlined, no
        titles, descriptions or defaults; `items` lowers lists' maxItems by field name."""
        schema = cls.model_json_schema(mode="serialization")
        inlined = _inlined(schema, schema.get("$defs", {}))
        for name, most in (items or {}).items():
            field = inlined["properties"][name]
            field["maxItems"] = min(field.get("maxItems", most), most)
        return inlined


_ANNOTATIONS = frozenset({"title", "description", "default", "$defs"})


def _inlined(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in schema:
        return _inlined(defs[schema["$ref"].rsplit("/", 1)[-1]], defs)
    inlined: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _ANNOTATIONS:
            continue
        if key == "properties":
            value = {name: _inlined(field, defs) for name, field in value.items()}
        elif isinstance(value, dict):
            value = _inlined(value, defs)
        elif isinstance(value, list):
            value = [_inlined(v, defs) if isinstance(v, dict) else v for v in value]
        inlined[key] = value
    return inlined


# -- the jobs' outputs -------------------------------------------------------------------------


def _keyword(value: Any) -> str | None:
    return clean_text(value, KEYWORD_CHARS) if isinstance(value, str) else None


def _bounded_text(max_chars: int) -> WithJsonSchema:
    return WithJsonSchema({"type": "string", "maxLength": max_chars})


def _at_most(count: int) -> AfterValidator:
    return AfterValidator(lambda found: found[:count] if isinstance(found, list)
                          else dict(list(found.items())[:count]))


Category = Annotated[Literal[CATEGORIES], BeforeValidator(_category)]
ProfileKey = Annotated[str, BeforeValidator(lambda value: _subject_key(value, PROFILE_KEY_CHARS))]
Value = Annotated[str, _cleaned(VALUE_CHARS), _bounded_text(VALUE_CHARS)]
# A placeholder key is as good as none: the fact is then named by its value.
FactKey = Annotated[str, BeforeValidator(lambda value: _subject_key(value, FACT_KEY_CHARS) or ""),
                    _bounded_text(FACT_KEY_CHARS)]
Keyword = Annotated[str, BeforeValidator(_keyword), _bounded_text(KEYWORD_CHARS)]
# Asked for as a list of {"key", "value"} pairs: an object with free keys cannot be
# bounded in a grammar (llama.cpp's and Ollama's take no maxProperties).
PROFILE_PAIRS = {"type": "array", "maxItems": MAX_PROFILE, "items": {
    "type": "object",
    "properties": {"key": {"type": "string", "maxLength": PROFILE_KEY_CHARS},
                   "value": {"type": "string", "maxLength": VALUE_CHARS}},
    "required": ["key", "value"]}}
# Validators run last-listed first: split a comma-separated string, keep the valid
# keywords, then the first MAX_KEYWORDS of them.
Keywords = Annotated[list[Keyword], WrapValidator(_valid_items), _at_most(MAX_KEYWORDS),
                     BeforeValidator(_comma_separated)]


class DistilledFact(BaseModel):
    model_config = _EVERY_FIELD_ASKED

    category: Category
    key: FactKey = ""
    value: Value

    @model_validator(mode="after")
    def _named(self) -> DistilledFact:
        if not self.key:
            self.key = " ".join(terms(self.value)[:KEY_WORDS])
        if not self.key:
            raise ValueError("a fact with neither key nor words to name it")
        return self


class DistillOutput(ModelOutput):
    """distill: the user's permanent profile attributes and dated facts."""

    profile: Annotated[dict[ProfileKey, Value], WrapValidator(_valid_entries),
                       _at_most(MAX_PROFILE), WithJsonSchema(PROFILE_PAIRS)] = Field(
        default_factory=dict)
    facts: Annotated[list[DistilledFact], WrapValidator(_valid_items), _at_most(MAX_FACTS)] = Field(
        default_factory=list, json_schema_extra={"maxItems": MAX_FACTS})

    @model_validator(mode="before")
    @classmethod
    def _an_extraction(cls, data: Any) -> Any:
        if isinstance(data, list):  # a bare list of facts
            return {"facts": data}
        if not isinstance(data, dict):
            raise ValueError("expected a JSON object")
        if data and "profile" not in data and "facts" not in data:
            raise ValueError("no profile or facts in the object")
        return data


def items_for(sources: int) -> dict[str, int]:
    """The most profile attributes and facts worth asking of `sources` source messages."""
    sources = max(1, sources)
    return {"profile": min(MAX_PROFILE, PROFILE_PER_SOURCE * sources),
            "facts": min(MAX_FACTS, FACTS_PER_SOURCE * sources)}


class CardOutput(ModelOutput):
    """compact and consolidate: a card's summary and its search keywords."""

    summary: Annotated[str, _cleaned(SUMMARY_CHARS), _bounded_text(SUMMARY_CHARS)]
    keywords: Keywords = Field(default_factory=list, json_schema_extra={"maxItems": MAX_KEYWORDS})


class ChunkOutput(DistillOutput):
    """learn: a chunk of turns in one answer — its profile attributes and facts, as
    distill's, and its card, as compact's."""

    summary: Annotated[str, _cleaned(SUMMARY_CHARS), _bounded_text(SUMMARY_CHARS)]
    keywords: Keywords = Field(default_factory=list, json_schema_extra={"maxItems": MAX_KEYWORDS})


class DiaryOutput(ModelOutput):
    """diary: a session's entry."""

    entry: Annotated[str, _cleaned(ENTRY_CHARS), _bounded_text(ENTRY_CHARS)]


# -- asking and judging ------------------------------------------------------------------------

Output = TypeVar("Output", bound=ModelOutput)


def parse_output(output: type[Output], job: str, raw: Any, text: str = "") -> Output:
    """The model's parsed JSON validated as `output`; InvalidOutput if nothing usable remains."""
    try:
        return output.model_validate(raw)
    except ValidationError as exc:
        raise InvalidOutput(job, _detail(exc), text) from None


def _detail(exc: ValidationError) -> str:
    error = exc.errors()[0]
    if error["type"] == "value_error":
        return str(error["ctx"]["error"])
    if error["type"] == "model_type":
        return "expected a JSON object"
    return "no " + ".".join(str(part) for part in error["loc"])


def ask_json(model: ModelClient, job: str, prompt: str, schema: Mapping[str, Any],
             system: str | None = None, after: SentChat | None = None,
             yield_to: Callable[[], bool] | None = None) -> tuple[dict | list, str]:
    """The parsed JSON value of the model's reply (and the raw text); InvalidOutput if none.

    With `after`, the question is asked as the next message of that chat, whose prompt
    the model server's cache still holds: only the question is read anew. With
    `yield_to`, the call gives way to a person (app.model.errors.ModelCallYielded). The
    call's output limit is what `schema` allows (output_limit); past it, or past the
    client's learning deadline, it is cut (app.model.errors.OverBudget)."""
    limit = output_limit(schema)
    if after is not None:
        question = f"{system}\n\n{prompt}" if system else prompt
        text = model.continue_json(after, question, schema, temperature=0.1, yield_to=yield_to,
                                   max_tokens=limit, job=job)
    else:
        text = model.generate_json(prompt, schema, system=system, temperature=0.1,
                                   yield_to=yield_to, max_tokens=limit, job=job)
    parsed = parse_json_leniently(text)
    if parsed is None:
        raise InvalidOutput(job, "no JSON object in the reply", text)
    return parsed, text


def output_limit(schema: Mapping[str, Any]) -> int | None:
    """The tokens a reply to `schema` needs at most: the characters of a reply at every
    bound (the most items, each string at its longest), at CHARS_PER_TOKEN; None for a
    schema with no bound somewhere (then only the deadline holds the call)."""
    chars = _most_chars(schema)
    return None if chars is None else -(-chars // CHARS_PER_TOKEN) + LIMIT_SLACK_TOKENS


def _most_chars(schema: Mapping[str, Any]) -> int | None:
    """The longest JSON text `schema` allows, with a space after each separator; None
    when unbounded."""
    if "enum" in schema:
        return max(len(json.dumps(value)) for value in schema["enum"])
    kind = schema.get("type")
    if kind == "string":
        most = schema.get("maxLength")
        return None if most is None else most + 2
    if kind == "array":
        item, most = _most_chars(schema.get("items") or {}), schema.get("maxItems")
        return None if item is None or most is None else 2 + most * (item + 2)
    if kind == "object":
        if schema.get("additionalProperties") not in (None, False):
            return None
        fields = [(name, _most_chars(field)) for name, field in schema.get("properties", {}).items()]
        if any(chars is None for _, chars in fields):
            return None
        return 2 + sum(len(json.dumps(name)) + 4 + (chars or 0) for name, chars in fields)
    if kind in ("number", "integer", "boolean", "null"):
        return 24
    return None


def parse_json_leniently(text: str) -> dict | list | None:
    """The outermost JSON object or array in model output, or None if none parses.

    Models wrap JSON in prose or ``` fences and sometimes leave trailing commas;
    both are tolerated. Of several JSON values in the text, the longest wins.
    """
    found = _longest_json_value(text)
    if found is None and "," in text:
        found = _longest_json_value(re.sub(r",(\s*[}\]])", r"\1", text))
    return found


_JSON_START = re.compile(r"[{\[]")


def _longest_json_value(text: str) -> dict | list | None:
    decoder = json.JSONDecoder()
    best: dict | list | None = None
    best_length = 0
    position = 0
    while True:
        match = _JSON_START.search(text, position)
        if match is None:
            return best
        start = match.start()
        try:
            value, end = decoder.raw_decode(text, start)
        except ValueError:
            position = start + 1
            continue
        if end - start > best_length:
            best, best_length = value, end - start
        position = end  # anything inside this value is nested in it, not outermost
