"""Which language a text is in, and how its keywords are analysed.

Every memory's language is detected when its text is written (the actions fill
Memory.language), and every search query's when it is analysed (memory.text.query): the keyword
signal stems both with PostgreSQL's own text-search configuration for that language
(`CONFIGURATIONS`: the Snowball stemmers and stop words PostgreSQL ships), `simple` (lower-cased
words, no stems, no stop words) for a language it has none for. Chinese, Japanese and Korean are
cut into overlapping character pairs before they reach the tsvector, as Lucene's CJK analyser
does: the database function engram_keyword_text (migration 0033), one implementation for the
stored memories and the queries alike.

The detector is py3langid (a naive-Bayes model over byte n-grams that ships in its package),
restricted to DETECTED; a text it cannot place with at least MIN_CONFIDENCE (a name alone,
"Berlin", "python") takes the deployment's ENGRAM_DEFAULT_LANGUAGE. A memory's context (the
neighbouring messages of its conversation) is analysed in the memory's language.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from django.conf import settings

# ISO 639-1 code -> PostgreSQL text-search configuration, for every configuration PostgreSQL 17
# ships a stemmer for. Frozen into migration 0033's engram_text_config(): a change here needs a
# migration that replaces that function and rebuilds the column.
CONFIGURATIONS: dict[str, str] = {
    "ar": "arabic",
    "hy": "armenian",
    "eu": "basque",
    "ca": "catalan",
    "da": "danish",
    "nl": "dutch",
    "en": "english",
    "fi": "finnish",
    "fr": "french",
    "de": "german",
    "el": "greek",
    "hi": "hindi",
    "hu": "hungarian",
    "id": "indonesian",
    "ga": "irish",
    "it": "italian",
    "lt": "lithuanian",
    "ne": "nepali",
    "no": "norwegian",
    "pt": "portuguese",
    "ro": "romanian",
    "ru": "russian",
    "sr": "serbian",
    "es": "spanish",
    "sv": "swedish",
    "ta": "tamil",
    "tr": "turkish",
}
# Languages detected whose keywords are plain words (the `simple` configuration): Chinese,
# Japanese and Korean (as character pairs), and others PostgreSQL has no stemmer for.
SIMPLE = ("zh", "ja", "ko", "uk", "pl", "cs", "sk", "bg", "fa", "he", "vi", "th", "hr", "sl")
DETECTED = (*CONFIGURATIONS, *SIMPLE)
# Below this probability (the detector's, normalised over DETECTED) a text's language is the
# deployment's default. On short texts: "Qué come Ana" 0.48 Spanish, "Wo wohnt Jürgen?" 0.70
# German, "Berlin" 0.11 (Turkish), "python" 0.15 (Polish).
MIN_CONFIDENCE = 0.3
# foreign_to(): a language is "sure" at this probability; and a text whose letters are less than
# this share Latin is of another script than a Latin-script language's.
SURE = 0.9
LATIN_SHARE = 0.5
# The detected languages not written in Latin letters.
NON_LATIN = frozenset(
    {"ar", "hy", "el", "hi", "ne", "ru", "sr", "ta", "uk", "bg", "fa", "he", "th"}
)
NON_LATIN |= {"zh", "ja", "ko"}
# Characters of a text the detector reads (its cost grows with the length).
MAX_DETECTED = 2000


@cache
def _identifier() -> Any:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    identifier.set_languages(DETECTED)
    return identifier


def default_language() -> str:
    return str(settings.ENGRAM_DEFAULT_LANGUAGE)


def detect(text: str) -> str:
    """The ISO 639-1 code of `text`'s language, one of DETECTED; the deployment's default when
    the detector is unsure (or the text has no letters)."""
    sample = text[:MAX_DETECTED]
    if not any(c.isalpha() for c in sample):
        return default_language()
    code, probability = _identifier().classify(sample)
    return str(code) if probability >= MIN_CONFIDENCE else default_language()


def foreign_to(text: str, languages: frozenset[str]) -> str | None:
    """The language of `text` when it is none of `languages` (a model's) and sure to be so: its
    letters are mostly of another script than the languages' (Cyrillic, Han, Arabic, ...), or
    the detector is at least SURE of it. None otherwise: a short question in Latin letters
    ("Does Søren play chess?", Danish at 0.34) is no proof that an English model cannot read it.
    """
    sample = text[:MAX_DETECTED]
    letters = [c for c in sample if c.isalpha()]
    if not languages or not letters:
        return None
    code, probability = _identifier().classify(sample)
    if code in languages or probability < MIN_CONFIDENCE:
        return None
    latin = sum(1 for c in letters if c < "\u0250") / len(letters)
    latin_languages = not languages & NON_LATIN
    if (latin_languages and latin < LATIN_SHARE) or probability >= SURE:
        return str(code)
    return None


def configuration(code: str) -> str:
    """The text-search configuration for a language code (as engram_text_config maps it)."""
    return CONFIGURATIONS.get(code, "simple")
