"""Rule-based capture: explicit statements, English and Spanish, and nothing else."""

from __future__ import annotations

import pytest

from app.learn.capture import capture_statements


@pytest.mark.parametrize("text, name", [
    ("Hi, my name is Ana García.", "Ana García"),
    ("me llamo Lucía y trabajo en Sevilla", "Lucía"),
    ("Mi nombre es Pedro.", "Pedro"),
])
def test_names(text, name):
    assert capture_statements(text).profile == {"name": name}


@pytest.mark.parametrize("text, place", [
    ("I live in Lisbon.", "Lisbon"),
    ("I live in New York and I use vim", "New York"),
    ("Vivo en Buenos Aires desde 2019.", "Buenos Aires"),
])
def test_where_the_user_lives(text, place):
    assert capture_statements(text).profile == {"location": place}


@pytest.mark.parametrize("text, fact", [
    ("Please remember that the staging DB moved to db2.",
     ("fact", "remember staging db moved db2", "the staging DB moved to db2")),
    ("Recuerda que el backup es a las 2.", ("fact", "remember backup 2", "el backup es a las 2")),
    ("I use neovim for Go.", ("preference", "uses neovim go", "uses neovim for Go")),
    ("Uso Arch Linux en casa.", ("preference", "uses arch linux casa", "uses Arch Linux en casa")),
    ("I prefer short answers", ("preference", "prefers short answers", "prefers short answers")),
    ("Prefiero respuestas cortas.", ("preference", "prefers respuestas cortas", "prefers respuestas cortas")),
])
def test_statements(text, fact):
    assert capture_statements(text).facts == [fact]


@pytest.mark.parametrize("text", [
    "el uso de memoria es alto",
    "we use docker",
    "I used to use emacs",
    "Can you remember things?",
    "What is my name?",
])
def test_anything_less_explicit_is_left_for_the_model(text):
    captured = capture_statements(text)
    assert captured.profile == {} and captured.facts == []
