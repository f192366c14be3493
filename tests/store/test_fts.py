"""MATCH queries built from user text find the right rows and never break FTS5."""

from __future__ import annotations

import apsw
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from app.fts import MAX_TERMS, STOP_WORDS, build_match_query, quote_term, terms

ROWS = {
    1: "My dog Bruno loves the dog park and chasing other dogs",
    2: "Bruno the dog was adopted in 2019",
    3: "The cat sleeps on the sofa all day",
    4: "Mi perro se llama Toby y le encanta el café con leche",
    5: "Tomamos café en la mañana antes del trabajo",
    6: "Le di mi corazón a la música",
    7: "Meeting notes: quarterly budget review",
}


@pytest.fixture(scope="module")
def db() -> apsw.Connection:
    con = apsw.Connection(":memory:")
    con.execute(
        "CREATE VIRTUAL TABLE t USING fts5("
        'content, tokenize="porter unicode61 remove_diacritics 2")'
    )
    con.executemany("INSERT INTO t (rowid, content) VALUES (?, ?)", ROWS.items())
    return con


def search(db: apsw.Connection, text: str, **options: int) -> list[int]:
    query = build_match_query(text, **options)
    assert query is not None
    return [rowid for (rowid,) in db.execute(
        "SELECT rowid FROM t WHERE t MATCH ? ORDER BY bm25(t)", (query,)
    )]


def test_best_matching_row_comes_first(db: apsw.Connection) -> None:
    assert search(db, "Where does my dog like to run? The park!") == [1, 2]


def test_stop_words_are_dropped() -> None:
    assert build_match_query("what is the name of my dog") == '"name" OR "dog"'


def test_spanish_stop_words_are_dropped_with_or_without_accents() -> None:
    assert terms("¿Cómo se llama mi perro?") == ["llama", "perro"]
    assert terms("como se llama mi perro") == ["llama", "perro"]


def test_english_words_that_look_spanish_are_kept() -> None:
    assert terms("my son loves the sea") == ["son", "loves", "sea"]


def test_terms_are_lower_cased_and_deduplicated_in_order() -> None:
    assert terms("Dog cat DOG Cat bird") == ["dog", "cat", "bird"]


def test_unaccented_query_finds_accented_words(db: apsw.Connection) -> None:
    assert sorted(search(db, "cafe")) == [4, 5]
    assert search(db, "corazon") == [6]


def test_accented_query_finds_the_same_rows(db: apsw.Connection) -> None:
    assert search(db, "corazón música") == [6]


def test_decomposed_accents_find_the_same_rows(db: apsw.Connection) -> None:
    assert search(db, "corazo\u0301n") == [6]


def test_accents_and_non_latin_scripts_survive_tokenisation() -> None:
    assert terms("Café Ñandú Москва 東京") == ["café", "ñandú", "москва", "東京"]


def test_emoji_and_punctuation_separate_words() -> None:
    assert terms("perro🐶gato...dog,cat!") == ["perro", "gato", "dog", "cat"]


def test_min_length_drops_short_words() -> None:
    assert build_match_query("dog cat name perro", min_length=4) == '"name" OR "perro"'


def test_nothing_left_gives_none() -> None:
    assert build_match_query("") is None
    assert build_match_query("the and of it") is None
    assert build_match_query("¿?!... 🎉") is None
    assert build_match_query("dog cat", min_length=4) is None


def test_terms_are_capped() -> None:
    many = " ".join(f"word{n}" for n in range(200))

    assert len(terms(many)) == MAX_TERMS


@pytest.mark.parametrize(
    "text",
    ['content:foo', 'bar*', '^start', 'NEAR(a b)', 'x AND y', 'x OR y', 'NOT z', '-minus +plus',
     '{content} : x', '"unbalanced', '(((dog)))', 'a"b'],
)
def test_fts5_syntax_in_user_text_is_only_words(db: apsw.Connection, text: str) -> None:
    query = build_match_query(text)

    assert query is not None
    for term in terms(text):
        assert quote_term(term) in query
    list(db.execute("SELECT rowid FROM t WHERE t MATCH ?", (query,)))


def test_operator_words_become_quoted_terms() -> None:
    assert build_match_query("NEAR budget") == '"near" OR "budget"'


def test_quote_inside_a_term_is_doubled(db: apsw.Connection) -> None:
    quoted = quote_term('say "hi"')

    assert quoted == '"say ""hi"""'
    list(db.execute("SELECT rowid FROM t WHERE t MATCH ?", (quoted,)))


def test_stop_words_cover_both_languages() -> None:
    assert {"the", "of", "what", "de", "qué", "que", "está", "esta"} <= STOP_WORDS
    assert not {"name", "dog", "perro", "café"} & STOP_WORDS


FTS5_SYNTAX = st.sampled_from(
    ['"', '""', "*", "^", ":", "(", ")", "{", "}", "-", "+", "NEAR", "NEAR(", "AND", "OR",
     "NOT", "content:", "t:", "🐶", "🎉", "\u200b", "\x00", " ", "café", "ß"]
)
ANY_TEXT = st.one_of(
    st.text(),
    st.lists(st.one_of(FTS5_SYNTAX, st.text(max_size=8)), max_size=30).map(" ".join),
    st.lists(st.one_of(FTS5_SYNTAX, st.text(max_size=4)), max_size=30).map("".join),
)


@settings(max_examples=400, deadline=None)
@given(text=ANY_TEXT)
@example(text="")
@example(text="x" * 10_000)
@example(text=" ".join(["NEAR(a b)", 'content:"x"', "*^()"] * 1_000))
@example(text="".join(chr(c) for c in range(0x20, 0x3000) if chr(c).isprintable())[:10_000])
def test_any_text_gives_none_or_a_query_fts5_accepts(db: apsw.Connection, text: str) -> None:
    query = build_match_query(text)

    assert (query is None) == (terms(text) == [])
    if query is not None:
        list(db.execute("SELECT rowid FROM t WHERE t MATCH ? ORDER BY bm25(t)", (query,)))


def test_words_are_stemmed_alike_from_many_threads_at_once():
    """A Snowball stemmer holds the word it works on: worker threads stemming at once must
    each get their own word's stems (else item43's stem comes back as item141's)."""
    from concurrent.futures import ThreadPoolExecutor

    from app.fts import stems

    words = [f"{stem}{n}" for n in range(400) for stem in ("item", "alpha", "running")]
    alone = {word: stems.__wrapped__(word) for word in words}
    stems.cache_clear()
    with ThreadPoolExecutor(max_workers=8) as pool:
        together = dict(zip(words, pool.map(stems, words), strict=True))
    assert together == alone
