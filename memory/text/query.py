"""A search query, analysed once: its embedding, the names it may mean, the words matched against
the scope's entity names by meaning (with their vectors), and the time window it names.

Inside a scope, the names its own user or agent goes by (`own_names`: memory.search.prepare
finds them) count like stop words: "Where does Dana live?" in Dana's scope ranks as "Where does
the user live?". Every signal reads the neutral text: the embedding, the names and the words
matched by meaning are the neutral text's, and the keyword signal's words leave the name out.
Otherwise the one memory that says "My name is Dana." would match the name in all three and
outrank the fact asked about (bench/assistant.py).

The embedding reads such a question both ways, as about the user ("Where does the user
live?") and in the user's own words ("Where do I live?"): the scope's memories are either,
first-person messages stored as they were said and the offline extractor's statements, or the
model extractor's third-person facts. The query's vector is the mean direction of the two
readings' (first_person(); docs/benchmarks.md, "Both readings of a question").

Every entry point analyses the query text with analyse() before it opens its transaction (a
hosted embedder is an HTTP call, which must never hold a transaction open) and passes the
Query down: hybrid search ranks with it, and the graph relations a search answers with are
found by its names. Nothing below analyses the text again. The words' vectors are looked up
whenever the query has names (they serve only searches that pin a scope; for the local model a
lookup costs nothing, a hosted embedder is asked once per new word, then cached).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.utils import timezone

from memory.text.embeddings import active_space, embed_query, embed_words, vocabulary_words
from memory.text.language import detect, foreign_to
from memory.text.recognise import CJK_NAME, query_names, query_words
from memory.text.reference import typical_match
from memory.text.temporal import Window, time_window

ENGLISH = frozenset({"en"})
# Query words' vectors kept per process (their text form, about 3.5 kB each): the local model's
# are looked up (embeddings.embed_words); a hosted embedder is asked for them.
WORD_CACHE = 2048


@dataclass(frozen=True)
class Query:
    text: str  # as asked
    # The query's embedding, in pgvector's text form.
    vector: str
    # Normalised names the query may mean (recognise.query_names).
    names: tuple[str, ...]
    # The query words matched against the scope's entity names by meaning, in pgvector's text
    # form (a vector[] literal), or None: the query has no names, or no word to match.
    word_vectors: str | None
    # The time window the query names ("last week"), relative to the reference time.
    window: Window | None
    # The words the keyword signal matches: the text without the scope's own names.
    keywords: str
    # The query's language (ISO 639-1, memory.text.language.detect): its keywords are stemmed as
    # that language's.
    language: str
    # The scope's own names the analysis read as its subject; None: not looked for yet.
    own_names: frozenset[str] | None = None
    # The query's closest cosine among the reference facts (memory.text.reference): how close
    # a direct answer comes. None: not known (the score goes without the answer gap).
    typical: float | None = None
    # The embedding model `vector` is in (embeddings.Space.name): the score is calibrated to it.
    model: str = ""


def analyse(
    text: str,
    *,
    reference: datetime | None = None,
    embedding: Sequence[float] | None = None,
    own_names: Collection[str] | None = None,
    subject: str = "the user",
) -> Query:
    """Analyse a search query. `reference` is the time "last week" counts back from (else now);
    `embedding`, if the caller has it already, is used instead of embedding the text;
    `own_names`, the normalised names of the scope's own user or agent, are read as `subject`
    ("the user", "the agent") and left out of the keyword words (see above); None: not known
    yet (with_own_names() applies them later)."""
    window = time_window(text, reference or timezone.now())
    return _analysed(text, window, own_names, subject, embedding)


def with_own_names(query: Query, own_names: Collection[str] | None, subject: str) -> Query:
    """`query` analysed again with the scope's own names read as `subject`: its embedding,
    names, words matched by meaning and keyword words are the neutral text's."""
    return _analysed(query.text, query.window, own_names, subject, None)


def _analysed(
    text: str,
    window: Window | None,
    own_names: Collection[str] | None,
    subject: str,
    embedding: Sequence[float] | None,
) -> Query:
    own = frozenset(own_names) if own_names is not None else None
    neutral, keywords = neutralise(text, own or (), subject)
    names = tuple(n for n in query_names(neutral) if n not in (own or ()))
    language = detect(neutral)
    if embedding is not None:
        vector = embedding
    elif neutral != text and foreign_to(neutral, ENGLISH) is None:
        vector = embed_query(neutral, first_person(text, own or ()))
    else:
        # The first person's reading is English grammar's (first_person): a question sure to
        # be in another language is read as about the user only.
        vector = embed_query(neutral)
    return Query(
        text=text,
        vector=literal(vector),
        typical=typical_match(vector),
        names=names,
        word_vectors=_word_vectors_of(neutral) if names else None,
        window=window,
        keywords=keywords,
        language=language,
        own_names=own,
        model=active_space().name,
    )


def neutralise(text: str, own_names: Collection[str], subject: str) -> tuple[str, str]:
    """The text with each of `own_names` (and its possessive) read as `subject`, and the text
    without them: ("Where does the user live?", "Where does   live?") for "Where does Dana
    live?". Names match whole words, whatever their case and spacing; the longest first."""
    pattern = _names_pattern(own_names)
    if pattern is None or pattern.search(text) is None:
        return text, text
    neutral = pattern.sub(lambda m: subject + ("'s" if m.group(2) else ""), text)
    return neutral, pattern.sub(" ", text)


# Prepositions after which a name reads as "me" in the first person ("What did Ana give to
# Dana?"); elsewhere it reads as "I" (its verb's object is rarer in questions about a user).
PREPOSITIONS = "about|after|at|before|by|for|from|like|near|of|on|to|with|without"
# The agreement the first person needs: a verb before "I" ("does I" -> "do I") and after it
# ("I has" -> "I have"), by the third person's form.
AGREEMENT = {
    "does": "do",
    "doesn't": "don't",
    "is": "am",
    "isn't": "aren't",
    "has": "have",
    "hasn't": "haven't",
}
_VERB_BEFORE = re.compile(rf"\b({'|'.join(map(re.escape, AGREEMENT))})(\s+I)\b", re.IGNORECASE)
_VERB_AFTER = re.compile(rf"\b(I\s+)({'|'.join(map(re.escape, AGREEMENT))})\b", re.IGNORECASE)


def first_person(text: str, own_names: Collection[str]) -> str:
    """The text as its own user or agent would say it: each of `own_names` read as "I" ("me"
    after a preposition), its possessive as "my", and the verbs next to it agreeing: "Where
    does Dana live?" -> "Where do I live?", "Is Dana's sister married?" -> "Is my sister
    married?", "Is Dana allergic to nuts?" -> "Am I allergic to nuts?". One pass over the text,
    whatever its length and number of names."""
    if not own_names:
        return text
    pattern = re.compile(
        rf"(?<!\w)(?:({PREPOSITIONS})(\s+))?({_alternatives(own_names)})(['\u2019]s)?(?!\w)",
        re.IGNORECASE,
    )

    def reading(match: re.Match[str]) -> str:
        preposition = (match[1] + match[2]) if match[1] else ""
        return preposition + ("my" if match[4] else "me" if preposition else "I")

    said, found = pattern.subn(reading, text)
    if not found:
        return text
    said = _VERB_BEFORE.sub(lambda m: _cased(AGREEMENT[m[1].lower()], m[1]) + m[2], said)
    return _VERB_AFTER.sub(lambda m: m[1] + AGREEMENT[m[2].lower()], said)


def _cased(word: str, like: str) -> str:
    """`word` capitalised as `like` is."""
    return word[:1].upper() + word[1:] if like[:1].isupper() else word


def _names_pattern(own_names: Collection[str]) -> re.Pattern[str] | None:
    """A pattern matching any of `own_names` as whole words, whatever their case and spacing,
    the longest first, with its possessive ("'s") as group 2; None without names."""
    if not own_names:
        return None
    spaced = [n for n in own_names if not _CJK.fullmatch(n)]
    unspaced = [n for n in own_names if _CJK.fullmatch(n)]
    parts = []
    if spaced:
        parts.append(rf"(?<!\w)({_alternatives(spaced)})(['\u2019]s)?(?!\w)")
    if unspaced:
        # No space or case ends a Chinese, Japanese or Korean name: matched anywhere, with the
        # honorific that follows it ("佐藤さん", "김지우 씨").
        parts.append(rf"({_alternatives(unspaced)})(){HONORIFIC}")
    return re.compile("|".join(f"(?:{p})" for p in parts), re.IGNORECASE)


_CJK = re.compile(f"[{CJK_NAME}]+")
HONORIFIC = r"(?:\s*(?:さん|くん|ちゃん|様|さま|氏|씨|님))?"


def _alternatives(own_names: Collection[str]) -> str:
    """`own_names` as a regular expression's alternatives, the longest first, any spacing."""
    names = sorted(own_names, key=len, reverse=True)
    return "|".join(r"\s+".join(map(re.escape, name.split())) for name in names)


def literal(vector: Sequence[float]) -> str:
    """A vector in pgvector's text form."""
    return "[" + ",".join(f"{x:.7f}" for x in vector) + "]"


def _word_vectors_of(text: str) -> str | None:
    """The vector[] literal of the query words matched by meaning, or None (see Query)."""
    # Only the words the local model's vocabulary has: a word outside it would cost a model run.
    words = vocabulary_words(query_words(text))
    if not words:
        return None
    return "{" + ",".join(f'"{v}"' for v in _word_vectors(words)) + "}"


_word_cache: OrderedDict[str, str] = OrderedDict()
_word_lock = threading.Lock()


def _word_vectors(words: list[str]) -> list[str]:
    """The words' vectors in pgvector's text form, the ones not cached embedded in one batch."""
    with _word_lock:
        found = {w: _word_cache[w] for w in words if w in _word_cache}
        for w in found:
            _word_cache.move_to_end(w)
    missing = [w for w in words if w not in found]
    if missing:
        made = {w: literal(v) for w, v in zip(missing, embed_words(missing), strict=True)}
        with _word_lock:
            _word_cache.update(made)
            while len(_word_cache) > WORD_CACHE:
                _word_cache.popitem(last=False)
        found.update(made)
    return [found[w] for w in words]
