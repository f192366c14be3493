"""Rule-based capture: what distill writes when the model cannot be used.

Only explicit statements in the user's own words, English and Spanish:
"remember that …" / "recuerda que …", "my name is …" / "me llamo …",
"I live in …" / "vivo en …", "I use …" / "uso …", "I prefer …" / "prefiero …".
Anything subtler waits for the model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from app.fts import terms

__all__ = ["KEY_TERMS", "Captured", "capture_statements"]

# A clause runs to the end of its sentence or line.
_CLAUSE = r"(?P<x>[^.!?;\n]{2,300})"
_START = r"(?:^|(?<=[.!?¡¿;,:\n])\s*|\b(?:and|y|also|también|pues|so)\s+)"

_REMEMBER = re.compile(rf"\b(?:please\s+|por favor,?\s+)?(?:remember|recuerda)\s+(?:that|que)\s+{_CLAUSE}",
                       re.IGNORECASE)
_NAME = re.compile(r"\b(?:my name is|me llamo|mi nombre es)\s+(?P<x>[^\W\d_][\w'’\-]*(?:\s+[^\W\d_][\w'’\-]*){0,3})",
                   re.IGNORECASE)
_LIVE = re.compile(r"(?:\bI\s+(?:live|am living|'m living|’m living)\s+in|(?<![\w])(?:yo\s+)?vivo\s+en)"
                   r"\s+(?P<x>[^\W\d_][\w'’\-]*(?:\s+[^\W\d_][\w'’\-]*){0,3})", re.IGNORECASE)
_USE = re.compile(rf"(?:\bI\s+(?:use|am using|'m using|’m using)|{_START}(?:yo\s+)?uso)\s+{_CLAUSE}",
                  re.IGNORECASE)
_PREFER = re.compile(rf"(?:\bI\s+(?:prefer|'d prefer)|{_START}(?:yo\s+)?prefiero)\s+{_CLAUSE}",
                     re.IGNORECASE)
# Words after a name (or a place) that are not part of it ("me llamo Ana y uso vim").
_NAME_STOP = {"and", "y", "but", "pero", "i", "yo", "from", "de", "im", "soy", "with", "con",
              "since", "desde", "now", "ahora", "for", "por", "where", "donde"}
KEY_TERMS = 4


@dataclass
class Captured:
    profile: dict[str, str] = field(default_factory=dict)
    # (category, key, value)
    facts: list[tuple[str, str, str]] = field(default_factory=list)


def _key(prefix: str, clause: str) -> str:
    words = terms(clause)[:KEY_TERMS]
    return " ".join([prefix, *words]).strip() if words else prefix


def _clause(match: re.Match) -> str:
    return " ".join(match.group("x").split()).strip(" ,")


def _name(match: re.Match) -> str:
    words = []
    for word in match.group("x").split():
        if word.casefold() in _NAME_STOP:
            break
        words.append(word)
    return " ".join(words)


def capture_statements(text: str) -> Captured:
    """The explicit statements in one user message."""
    found = Captured()
    for match in _NAME.finditer(text):
        name = _name(match)
        if name:
            found.profile["name"] = name
    for match in _LIVE.finditer(text):
        place = _name(match)
        if place:
            found.profile["location"] = place
    for match in _REMEMBER.finditer(text):
        clause = _clause(match)
        found.facts.append(("fact", _key("remember", clause), clause))
    for match in _USE.finditer(text):
        clause = _clause(match)
        found.facts.append(("preference", _key("uses", clause), f"uses {clause}"))
    for match in _PREFER.finditer(text):
        clause = _clause(match)
        found.facts.append(("preference", _key("prefers", clause), f"prefers {clause}"))
    return found
