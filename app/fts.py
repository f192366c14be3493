"""The one place FTS5 MATCH queries are built from user text, and words are read from it
(`terms`: stop-words dropped; `stems`: Snowball's English and Spanish stems).

User text never reaches MATCH as syntax: it is split into words (Unicode-aware, so
accents and non-Latin scripts survive), English and Spanish stop-words are dropped,
and every remaining word becomes a double-quoted phrase joined with OR. Inside
quotes, `AND`, `NEAR`, `content:`, `*` and `^` are plain text, never operators.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from functools import cache

__all__ = ["MAX_TERMS", "ENGLISH_STOP_WORDS", "SPANISH_STOP_WORDS", "STOP_WORDS", "terms", "stems",
           "quote_term", "build_match_query"]

# More terms make bm25 slower without finding better rows.
MAX_TERMS = 64

# Splits where unicode61 does (punctuation, emoji, combining marks), except at "_".
_WORD = re.compile(r"\w+", re.UNICODE)


def _with_unaccented_forms(words: str) -> frozenset[str]:
    # Users type "que" as often as "qué"; both must be dropped.
    listed = words.split()
    return frozenset(listed) | {_strip_accents(word) for word in listed}


def _strip_accents(word: str) -> str:
    decomposed = unicodedata.normalize("NFD", word)
    bare = "".join(c for c in decomposed if unicodedata.category(c) != "Mn")
    return unicodedata.normalize("NFC", bare)


ENGLISH_STOP_WORDS: frozenset[str] = _with_unaccented_forms("""
    a about above after again against all also am an and any are as at
    be because been before being below between both but by
    can could did do does doing down during each either else ever every
    few for from further get got had has have having he her here hers herself him
    himself his how however i if in into is it its itself just let lets
    may me might more most much must my myself neither no nor not now
    of off on once only or other ought our ours ourselves out over own
    please same shall she should since so some such than that then the their theirs
    them themselves there these they this those though through thus to too
    under until up upon us very was we were what whatever when where whether which
    while who whom whose why will with would yet you your yours yourself yourselves
    hello hi hey ok okay yes thanks thank
    s t d ll m o re ve y
    ain aren couldn didn doesn don hadn hasn haven isn mightn mustn needn shan
    shouldn wasn weren wouldn
    im ive id youre youve theyre thats whats dont doesnt didnt cant isnt arent
""")

# Spanish words that are also English content words ("son", "era", "sea", "tan",
# "van", "solo") are left out so English queries keep them.
SPANISH_STOP_WORDS: frozenset[str] = _with_unaccented_forms("""
    a al algo algún alguna algunas alguno algunos ante antes aquel aquella aquellas
    aquello aquellos aquí así aun aún
    bajo bien cada casi cierto como cómo con contra cual cuál cuales cuáles cualquier
    cuando cuándo cuanto cuánto cuanta cuánta cuantos cuántos cuantas cuántas
    de del desde después donde dónde durante e el él ella ellas ello ellos en entonces
    entre éramos eran eres es esa esas ese eso esos esta está estaba estaban
    estado estamos están estar estará estas estás este esté esto estos estoy
    fue fueron fui fuimos ha había habían haber habrá hace hacia han has hasta hay
    haya he hemos hola
    la las le les lo los me mi mí mía mías mientras mío míos mis misma mismas mismo
    mismos mucha muchas mucho muchos muy más nada nadie ni ninguna ninguno no nos
    nosotras nosotros nuestra nuestras nuestro nuestros nunca o os otra otras otro otros
    para pero poco por porque pues que qué quien quién quienes quiénes
    se según ser será sí si siempre sido sin sino sobre sois somos soy su sus suya
    suyas suyo suyos también tampoco tanto te tendrá tenemos tener tenga tengo tenía
    tenían ti tiene tienen toda todas todavía todo todos tras tu tú tus tuya tuyas
    tuyo tuyos u un una unas uno unos usted ustedes
    vosotras vosotros vuestra vuestras vuestro vuestros y ya yo
    ésa ésas ése ésos ésta éstas éste éstos
    allí allá ahí acá además ahora aunque cierta ciertas ciertos cosa cosas
    demás dentro deben debe debo hacer hago hizo hubo luego menos
    muchísimo pocos poca pocas puede pueden puedo pudo quiere quiero sabe sé
    sean sería serían tal tales
    vamos vas va voy vez veces
""")

STOP_WORDS: frozenset[str] = ENGLISH_STOP_WORDS | SPANISH_STOP_WORDS


def terms(text: str, *, min_length: int = 1) -> list[str]:
    """The words of text worth searching for: lower-cased, no stop-words, each once."""
    found: dict[str, None] = {}
    # NFC: a decomposed "corazo\u0301n" would otherwise split at its accent.
    for word in _WORD.findall(unicodedata.normalize("NFC", text.lower())):
        if _is_search_term(word, min_length) and word not in found:
            found[word] = None
            if len(found) == MAX_TERMS:
                break
    return list(found)


@cache
def stems(word: str) -> frozenset[str]:
    """The word's English and Spanish stems (Snowball): "failed" and "fails" are "fail"."""
    # A Snowball stemmer keeps the word it works on in itself: one thread at a time, or a
    # worker thread's word comes back as another's stem (two workers' facts merged).
    with _STEMMING:
        return frozenset(stemmer.stemWord(word) for stemmer in _stemmers())


_STEMMING = threading.Lock()


@cache
def _stemmers() -> list:
    import snowballstemmer  # start-up: ~60 ms, and only learning and its writes stem words

    return [snowballstemmer.stemmer(language) for language in ("english", "spanish")]


def _is_search_term(word: str, min_length: int) -> bool:
    # unicode61 splits on "_", so an all-underscore word would be an empty phrase.
    return len(word) >= min_length and word not in STOP_WORDS and word.strip("_") != ""


def quote_term(term: str) -> str:
    """term as an FTS5 string: double-quoted, inner quotes doubled."""
    return '"' + term.replace('"', '""') + '"'


def build_match_query(text: str, *, min_length: int = 1) -> str | None:
    """A MATCH expression finding rows with any of text's terms, or None if it has none.

    min_length drops short words (4 keeps "name" and "perro" but not "cat").
    """
    found = terms(text, min_length=min_length)
    if not found:
        return None
    return " OR ".join(quote_term(term) for term in found)
