"""The secrets corpus and the benign corpus through the redactor: recall and false positives."""

from __future__ import annotations

from app.sanitize import redact_secrets
from tests.reliability.secrets_corpus import PROSE, benign, secrets

MIN_FORMATS = 60
PROSE_NAMES = {name for name, _, _ in PROSE}


def test_the_corpus_covers_at_least_sixty_real_formats() -> None:
    formats = {p.name for p in secrets() if p.name not in PROSE_NAMES}
    assert len(formats) >= MIN_FORMATS


def test_every_planted_secret_is_redacted() -> None:
    planted = secrets()
    missed = [p.name for p in planted
              if any(piece in redact_secrets(p.text).text for piece in p.pieces)]
    recall = 1 - len(missed) / len(planted)
    print(f"secrets recall: {recall:.3f} ({len(planted) - len(missed)}/{len(planted)}); missed: {missed}")
    assert missed == []


def test_no_look_alike_is_touched() -> None:
    texts = benign()
    touched = {name: redact_secrets(text).kinds for name, text in texts.items()
               if redact_secrets(text).text != text}
    rate = len(touched) / len(texts)
    print(f"false positives: {rate:.3f} ({len(touched)}/{len(texts)}); touched: {touched}")
    assert touched == {}
