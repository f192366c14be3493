"""What the demo model says: plain answers from what it was told, and the JSON Hilo's
workers ask for, made from the user's own lines.

A script, not a model. A chat message gets a short plain answer: a question about the
user (name, where they live, what they prefer or use, what is remembered) answered from
the memory Hilo put in the prompt and the conversation, a statement acknowledged, a
greeting returned; in Spanish when spoken to in Spanish. A learning call (a JSON schema
in `format`) is answered by filling the schema: the profile and facts the user's lines
state, read by the rules the workers fall back on (app/learn/capture.py), a summary and
keywords, a diary sentence. So the memory page and recall show what was said.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from app.fts import terms
from app.learn.capture import capture_statements

__all__ = ["INTRODUCTION_EN", "INTRODUCTION_ES", "EMBEDDING_DIM", "KEYWORDS", "Known", "spanish",
           "known_from", "chat_reply", "json_answer", "diary_sentence", "keywords", "embedding"]

# What the model says it is, when it has nothing better to say.
INTRODUCTION_EN = ("I am Hilo's demo model: a script, not a real model. Tell me about yourself "
                   "(\"my name is …\", \"I live in …\", \"I prefer …\") and ask me later, here "
                   "or in a new chat: Hilo remembers it for me.")
INTRODUCTION_ES = ("Soy el modelo de demostración de Hilo: un guion, no un modelo de verdad. "
                   "Cuéntame de ti («me llamo …», «vivo en …», «prefiero …») y pregúntame "
                   "luego, aquí o en otro chat: Hilo lo recuerda por mí.")
EMBEDDING_DIM = 64
KEYWORDS = 6

# A line of a learning prompt: "USER: …", "ASSISTANT (context only): …", "TOOL (x): …".
_LINE = re.compile(r"^(?P<label>[A-Z][A-Za-z ,()_-]*?(?: \([^)]*\))?): (?P<text>.*)$")
# Hilo's memory layers as its prompt writes them (app/turn/context.py): "name: Ana" under
# "About the user", "- [2026-12-07] (preference) editor: prefers vim" among the facts.
_PROFILE_LINE = re.compile(r"^\s*(?P<key>name|location): (?P<value>.+)$")
_FACT_LINE = re.compile(r"^\s*- \[[\d-]+\] \((?P<category>\w+)\) [^:]+: (?P<value>.+)$")
# What Hilo put before a message's text for that message (app/turn/context.py's note).
_NOTE = re.compile(r"(?s)<memory>.*?</memory>\s*")
_SPANISH = re.compile(r"[¿¡ñáéíóú]|\b(?:me llamo|vivo|d[oó]nde|c[oó]mo|qu[eé]|hola|prefiero|"
                      r"uso|mi nombre|sabes|recuerdas|gracias)\b", re.IGNORECASE)
_GREETING = re.compile(r"^\W*(?:hi|hello|hey|good (?:morning|afternoon|evening)|hola|buenas|"
                       r"buenos d[ií]as)\b", re.IGNORECASE)
_ASKS = {
    "name": re.compile(r"\b(?:what(?:'s| is) my name|who am i|c[oó]mo me llamo|"
                       r"cu[aá]l es mi nombre)\b", re.IGNORECASE),
    "location": re.compile(r"\b(?:where do i live|where am i|where (?:do|did) i say i live|"
                           r"d[oó]nde vivo)\b", re.IGNORECASE),
    "preferences": re.compile(r"\b(?:what|which)\b.*\b(?:do i|i) (?:prefer|use|like)\b|"
                              r"\bqu[eé]\b.*\b(?:prefiero|uso)\b", re.IGNORECASE),
    "everything": re.compile(r"\bwhat do you (?:know|remember) about me\b|"
                             r"\bqu[eé] (?:sabes|recuerdas) de m[ií]\b", re.IGNORECASE),
}


@dataclass
class Known:
    """What the demo model knows about the user, from the prompt it was sent."""

    profile: dict[str, str] = field(default_factory=dict)
    preferences: list[str] = field(default_factory=list)  # "prefers vim", "uses Arch"
    remembered: list[str] = field(default_factory=list)


def spanish(text: str) -> bool:
    return bool(_SPANISH.search(text))


def known_from(texts: Iterable[str]) -> Known:
    """What the prompt says about the user: Hilo's memory layers ("name: Ana", a fact
    "prefers vim") and what the user's own messages state."""
    known = Known()
    for text in texts:
        for line in text.splitlines():
            entry = _PROFILE_LINE.match(line)
            if entry:
                known.profile.setdefault(entry["key"], entry["value"].strip())
            fact = _FACT_LINE.match(line)
            if fact:
                value = fact["value"].strip()
                target = (known.preferences if value.startswith(("prefers ", "uses "))
                          else known.remembered)
                if value not in target:
                    target.append(value)
        captured = capture_statements(_NOTE.sub("", text))
        for key, value in captured.profile.items():
            known.profile.setdefault(key, value)
        for category, _, value in captured.facts:
            target = known.preferences if category == "preference" else known.remembered
            if value not in target:
                target.append(value)
    return known


def chat_reply(messages: Sequence[Mapping[str, Any]], system: str = "") -> str:
    """The plain answer to the last user message of a chat."""
    asked = _last_user_text(messages)
    texts = [system, *(_text(m) for m in messages)]
    known = known_from(texts)
    es = spanish(asked)
    for topic, pattern in _ASKS.items():
        if pattern.search(asked):
            return _answer(topic, known, es)
    told = capture_statements(asked)
    if told.profile or told.facts:
        return _acknowledge(told.profile, [value for _, _, value in told.facts], es)
    if _GREETING.match(asked):
        name = known.profile.get("name")
        hello = ("¡Hola" if es else "Hello") + (f", {name}" if name else "") + "! "
        return hello + (INTRODUCTION_ES if es else INTRODUCTION_EN)
    return INTRODUCTION_ES if es else INTRODUCTION_EN


def _answer(topic: str, known: Known, es: bool) -> str:
    name, place = known.profile.get("name"), known.profile.get("location")
    if topic == "name":
        if name:
            return f"Te llamas {name}." if es else f"Your name is {name}."
    elif topic == "location":
        if place:
            return f"Vives en {place}." if es else f"You live in {place}."
    elif topic == "preferences":
        if known.preferences:
            said = _listed([_person(value, 1 if es else 0) for value in known.preferences], es)
            return f"Por lo que me dijiste: {said}." if es else f"From what you told me: {said}."
    else:
        parts = ([f"name: {name}"] if name else []) + ([f"lives in {place}"] if place else [])
        parts += known.preferences + known.remembered
        if parts:
            return ("Esto es lo que sé de ti: " if es else "This is what I know about you: ") + \
                "; ".join(parts) + "."
    return ("Aún no lo sé: dímelo y Hilo lo recordará." if es
            else "I don't know yet: tell me, and Hilo will remember it.")


# How a captured statement reads said back to the user, and about them: "prefers vim" →
# "you prefer vim" / "prefieres vim" / "they prefer vim".
_PERSONS = {"prefers ": ("you prefer ", "prefieres ", "they prefer "),
            "uses ": ("you use ", "usas ", "they use ")}


def _person(value: str, form: int) -> str:
    for third, said in _PERSONS.items():
        if value.startswith(third):
            return said[form] + value[len(third):]
    return value


def _acknowledge(profile: Mapping[str, str], facts: list[str], es: bool) -> str:
    said = []
    if "name" in profile:
        said.append(f"encantado, {profile['name']}" if es else f"nice to meet you, {profile['name']}")
    if "location" in profile:
        said.append(f"vives en {profile['location']}" if es else f"you live in {profile['location']}")
    said += [_person(value, 1 if es else 0) for value in facts]
    text = "; ".join(said)
    ending = " Lo recordaré." if es else " I will remember that."
    return text[0].upper() + text[1:] + "." + ending


def _listed(items: list[str], es: bool) -> str:
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + (" y " if es else " and ") + items[-1]


# -- learning calls ------------------------------------------------------------------------


def json_answer(schema: Mapping[str, Any], prompt: str) -> dict[str, Any]:
    """A learning call's answer: `schema`'s properties filled from the prompt's lines —
    the user's lines (never the assistant's, never earlier ones) for the profile and
    facts; every line for the summary, keywords and diary entry."""
    lines = _labelled_lines(prompt)
    users = [text for label, text in lines if label.startswith("USER")]
    captured = [capture_statements(text) for text in users]
    answer: dict[str, Any] = {}
    for name in (schema.get("properties") or {}):
        if name == "profile":
            answer[name] = {k: v for c in captured for k, v in c.profile.items()}
        elif name == "facts":
            answer[name] = [{"category": category, "key": key, "value": value}
                            for c in captured for category, key, value in c.facts]
        elif name in ("summary", "entry"):
            answer[name] = diary_sentence(lines)
        elif name == "keywords":
            answer[name] = keywords([text for _, text in lines])
    return answer


def diary_sentence(lines: Sequence[tuple[str, str]]) -> str:
    """One sentence of what was said: what the user told about themselves and asked,
    else what it was about."""
    users = [text for label, text in lines if label.startswith("USER")]
    earlier = [text for label, text in lines if label == "EARLIER"]
    said: list[str] = []
    name = None
    for text in users:
        captured = capture_statements(text)
        name = captured.profile.get("name", name)
        if "location" in captured.profile:
            said.append(f"they live in {captured.profile['location']}")
        said += [_person(value, 2) if category == "preference"
                 else f"I should remember that {value}" for category, _, value in captured.facts]
    questions = [q.strip() for text in users for q in re.findall(r"[^.!?¿]*\?", text)]
    parts = []
    if said:
        parts.append("said " + _listed(said, es=False))
    elif name:
        parts.append("introduced themselves")
    if questions:
        parts.append(f"asked \"{_short(questions[-1], 60)}\"")
    if parts:
        return f"{name or 'The user'} " + _listed(parts, es=False) + "."
    subjects = keywords(users + earlier) or keywords([text for _, text in lines])
    if subjects:
        return f"The user talked about {_listed(subjects[:3], es=False)}."
    return "A short conversation with nothing to note."


def keywords(texts: Iterable[str]) -> list[str]:
    counts: dict[str, int] = {}
    for text in texts:
        for word in terms(text, min_length=3):
            counts[word] = counts.get(word, 0) + 1
    return sorted(counts, key=lambda word: -counts[word])[:KEYWORDS]


def embedding(text: str, dim: int = EMBEDDING_DIM) -> list[float]:
    """A hashed bag of words, normalised: texts that share words are close."""
    vector = [0.0] * dim
    for word in terms(text) or [text.lower()]:
        digest = hashlib.sha256(word.encode()).digest()
        vector[int.from_bytes(digest[:4], "big") % dim] += 1.0 if digest[4] % 2 else -1.0
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]


def _labelled_lines(prompt: str) -> list[tuple[str, str]]:
    found = []
    for line in prompt.splitlines():
        match = _LINE.match(line.strip())
        if match and match["label"].split(" ")[0].isupper():
            found.append((match["label"], match["text"]))
    return found


def _last_user_text(messages: Sequence[Mapping[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return _NOTE.sub("", _text(message)).strip()
    return ""


def _text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI's parts
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return ""


def _short(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[:chars - 1].rstrip() + "…"
