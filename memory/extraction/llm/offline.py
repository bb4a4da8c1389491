"""The offline extractor: a deterministic, rule-based stand-in for a model (no API key).

First-person statements kept sentence by sentence (in English, and in the languages
recognise.mentions_self reads; CJK sentences end at their full stops), repeats of a close
memory known, and a small graph read from a few fixed first-person forms ("I live in ...", "my
dog is called ...", and where one lives and works in German, Spanish, French, Russian,
Chinese, Japanese and Korean). `only_states` and `EXCLUSIVE` are also what the pipeline uses
to supersede the memory of an ended relationship (extraction.graph_step.superseding).

May import llm.types, llm.clean, memory.text.recognise and memory.text.language (pure
functions) only.
"""

# ruff: noqa: RUF001 (other languages' punctuation and words, in their own scripts)

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from datetime import date

from memory.extraction.llm.clean import clean_entities, clean_relations
from memory.extraction.llm.types import (
    Context,
    Contradictions,
    Decision,
    Decisions,
    EntityRef,
    Existing,
    Fact,
    KnownEdge,
    Relations,
    Triple,
    Turn,
    Usage,
)
from memory.text.language import detect
from memory.text.recognise import mentions_self

FIRST_PERSON = re.compile(r"\b(i|i'm|i've|i'd|i'll|me|my|mine|we|our|us)\b", re.IGNORECASE)
# A leading greeting or acknowledgement ("Hello, ", "Thanks! ", "OK so "), stripped so the
# statement after it is kept ("Hello, my name is Ann." keeps "my name is Ann.").
GREETING = re.compile(
    r"^(?:(?:hi|hello|hey|thanks|thank you|bye|goodbye|good (?:morning|evening|night)|ok|okay|"
    r"cool|well|so|oh)\b(?: there)?[\s,;:!.-]*)+",
    re.IGNORECASE,
)
# Short first-person replies that state nothing.
FILLERS = frozenset(
    {
        "i see",
        "i know",
        "i agree",
        "me too",
        "i guess",
        "i think so",
        "i don't know",
        "i'm fine",
        "i'm good",
        "i'm ok",
        "i'm okay",
        "i am fine",
        "i'm sorry",
        "i see you",
        "i understand",
    }
)
# A statement about the user in the third person, as agent frameworks store what they learnt
# ("User likes the color blue.", AutoGen's example; "The user's name is Ann."): kept as is.
ABOUT_USER = re.compile(r"^(?:the\s+)?user(?:'s|\u2019s)?\s+\w", re.IGNORECASE)
# A sentence ends at ". ", "! ", "? ", or at Chinese and Japanese full stops with no space.
SENTENCE = re.compile(r"(?<=[.!?])\s+|(?<=[。！？])\s*")
# Languages whose statements usually leave the first person out: Spanish, Italian, Portuguese,
# Arabic, Japanese, Korean.
PRO_DROP = frozenset({"es", "it", "pt", "ar", "ja", "ko"})
# A question, in any script's question mark.
QUESTION = ("?", "\uff1f", "\u061f")
# Characters of Chinese, Japanese and Korean: a statement of this many has as much to say as
# one of two words elsewhere.
CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af]")
CJK_STATEMENT = 4
DUPLICATE_SIMILARITY = 0.9

# The offline graph: first-person statements of a few fixed forms. The object is what follows
# the verb up to a clause boundary, at most six words, without a leading article.
_BOUNDARY = (
    r"and|but|because|since|so|when|while|with|at|on|in|for|from|every|anymore|any more|"
    r"last|next|this|yesterday|today|tomorrow|ago|recently|now|"
    # German, Spanish, French, Russian: and, but, with, since, now
    r"und|aber|mit|seit|jetzt|y|pero|con|desde|ahora|et|mais|avec|depuis|и|но|с|уже|сейчас"
)
_OBJECT = rf"(?P<object>[^.,;:!?()\n]+?)(?=\s+(?:{_BOUNDARY})\b|[.,;:!?()\n]|$)"
_RELATION_FORMS: tuple[tuple[re.Pattern[str], str], ...] = tuple(  # noqa: RUF005
    (re.compile(pattern + _OBJECT, re.IGNORECASE), relationship)
    for pattern, relationship in (
        (
            r"\b(?:i|we) (?:really |also |still |absolutely )?(?:don't|do not|no longer) "
            r"(?:like|love|enjoy) ",
            "dislikes",
        ),
        (r"\b(?:i|we) (?:really |also |still |absolutely )?(?:like|love|enjoy|adore) ", "likes"),
        (r"\b(?:i|we) (?:really |also |still )?(?:hate|dislike|can't stand) ", "dislikes"),
        (r"\b(?:i|we) (?:really |also |still )?prefer ", "prefers"),
        (r"\b(?:i|we) (?:now |still |currently )?live in ", "lives_in"),
        (r"\b(?:i|we) (?:just |recently )?moved to ", "lives_in"),
        (r"\b(?:i|we) (?:now |still |currently )?work (?:at|for) ", "works_at"),
        (r"\b(?:i|we) (?:now |still |currently )?work as (?:an? )?", "works_as"),
        (r"\bi(?:'m| am) (?:severely |very |a bit )?allergic to ", "allergic_to"),
        (r"\bi(?:'m| am) married to ", "married_to"),
        (r"\b(?:i|we) (?:play|plays) (?:the )?", "plays"),
        (r"\bi(?:'m| am) (?:learning|studying) ", "studies"),
        # German, Spanish, French and Russian: where one lives and works.
        (r"\bich (?:wohne|lebe) (?:jetzt |inzwischen |seit \w+ )?in ", "lives_in"),
        (r"\bich arbeite (?:jetzt |seit \w+ )?(?:bei|für) ", "works_at"),
        (r"\bich arbeite (?:jetzt )?als ", "works_as"),
        (r"\b(?:yo )?vivo (?:ahora |actualmente )?en ", "lives_in"),
        (r"\bme mudé a ", "lives_in"),
        (r"\btrabajo (?:ahora )?(?:en|para) ", "works_at"),
        (r"\btrabajo (?:ahora )?como ", "works_as"),
        (r"\bj['\u2019]habite (?:maintenant |désormais )?(?:à|au|en) ", "lives_in"),
        (r"\bje vis (?:maintenant )?(?:à|au|en) ", "lives_in"),
        (r"\bje travaille (?:maintenant )?(?:chez|pour) ", "works_at"),
        (r"\bje travaille (?:maintenant )?comme ", "works_as"),
        (r"(?<!\w)я (?:сейчас |теперь )?живу в ", "lives_in"),
        (r"(?<!\w)я (?:сейчас |теперь )?работаю в ", "works_at"),
    )
) + (
    # Chinese, Japanese and Korean: no spaces; the place is a run of characters before or
    # after the verb ("我住在成都", "福岡に住んでいます", "부산에 살아요").
    (
        re.compile(
            r"我(?:现在|目前)?住在(?P<object>[\u4e00-\u9fff]{2,6}?)(?=[，。！？、]|$|了|的)"
        ),
        "lives_in",
    ),
    (
        re.compile(
            r"(?:(?:今|現在)は)?(?P<object>[\u4e00-\u9fff\u30a0-\u30ff]{2,6})に住んで(?:います|いる)?"
        ),
        "lives_in",
    ),
    (re.compile(r"(?P<object>[\uac00-\ud7af]{2,6})에\s*(?:살아요|살고|삽니다|살아)"), "lives_in"),
)
_MY_NAMED = re.compile(
    r"\b(?i:my) (?P<kind>wife|husband|partner|son|daughter|child|kid|dog|cat|pet|brother|sister|"
    r"mother|mom|mum|father|dad|friend|boss|manager)(?:'s name)? (?:is (?:called |named )?|"
    r"called |named )(?P<object>[A-Z][\w'-]*(?: [A-Z][\w'-]*){0,2})"
)
# The relationship of a named kind, synonyms as one ("my mum" and "my mom" are has_mother).
_KIND_SYNONYMS = {"mom": "mother", "mum": "mother", "dad": "father"}
_ARTICLE = re.compile(r"^(?:a|an|the|some|my|our)\s+", re.IGNORECASE)
# Relationships a subject has one of at a time: a new destination ends the old one. Pets,
# children, siblings and friends are not among them (one can have two dogs).
EXCLUSIVE = frozenset(
    {
        "lives_in",
        "works_at",
        "works_as",
        "married_to",
        "has_wife",
        "has_husband",
        "has_partner",
        "has_mother",
        "has_father",
        "has_boss",
        "has_manager",
    }
)
OPPOSITE = {"likes": "dislikes", "dislikes": "likes", "prefers": "dislikes"}


def first_person(text: str) -> bool:
    """Whether a user's statement is in the first person: it says "I", "my"... (in English or
    the languages recognise.mentions_self reads), or it is in a language whose verbs carry the
    person and usually drop the pronoun (PRO_DROP: "Vivo en Zapopan.", "福岡に住んでいます。")."""
    return bool(FIRST_PERSON.search(text) or mentions_self(text) or detect(text) in PRO_DROP)


def _object(text: str) -> str | None:
    words = _ARTICLE.sub("", text.strip()).split()
    return " ".join(words) if 0 < len(words) <= 6 else None


def offline_triples(text: str, self_name: str) -> list[tuple[str, str, str]]:
    """The (source, relationship, destination) triples of one first-person statement."""
    found: list[tuple[str, str, str]] = []
    taken: list[tuple[int, int]] = []
    for pattern, relationship in _RELATION_FORMS:
        for match in pattern.finditer(text):
            span = match.span()
            if any(span[0] < end and start < span[1] for start, end in taken):
                continue  # "don't like" already read as dislikes
            obj = _object(match.group("object"))
            if obj:
                taken.append(span)
                found.append((self_name, relationship, obj))
    found += [
        (self_name, _named(match), match.group("object")) for match in _MY_NAMED.finditer(text)
    ]
    return found


def _named(match: re.Match[str]) -> str:
    """The relationship of a _MY_NAMED statement: "my mum is called Ann" is has_mother."""
    kind = match.group("kind").lower()
    return "has_" + _KIND_SYNONYMS.get(kind, kind)


def only_states(text: str, relationships: Collection[str]) -> bool:
    """Whether `text` is a first-person statement of some of `relationships` (offline_triples'
    forms, "my partner is called Sam" among them) and says nothing more: beyond those
    statements, one word at most ("I live in Porto now.", "My partner's name is Sam now.") and
    punctuation. A memory that does is the one to replace when they end."""
    spans: list[tuple[int, int]] = []
    for pattern, relationship in (*_RELATION_FORMS, (_MY_NAMED, None)):
        for match in pattern.finditer(text):
            if (relationship or _named(match)) not in relationships:
                return False
            spans.append(match.span())
    if not spans:
        return False
    rest = "".join(c for i, c in enumerate(text) if not any(a <= i < b for a, b in spans))
    # A run of CJK characters is several words: two characters at most ("了", "现在").
    return len(re.findall(r"\w+", CJK.sub("", rest))) + len(CJK.findall(rest)) / 2 <= 1


class OfflineExtractor:
    """A deterministic stand-in when no Claude key is configured.

    It keeps first-person statements (first_person(): English's, those recognise.mentions_self
    reads in German, Spanish, French, Russian, Arabic, Hindi, Chinese, Japanese and Korean, and
    any statement in a language that drops the pronoun) and statements about "the user"
    (ABOUT_USER) from user messages (for an agent
    scope, the agent's own messages, first person or not), sentence by sentence, verbatim but for a
    leading greeting ("Hello, my name is Ann." keeps "My name is Ann."); drops questions,
    single words and short fillers ("I see", "me too");
    treats a statement as known (NONE) when an existing memory is at least 0.9 similar; and
    otherwise ADDs (the pipeline then makes an ADD that ends an exclusive relationship the
    UPDATE of the memory stating only its old value: graph_step.superseding). It never deletes,
    resolves no dates and assigns no categories.
    A procedural memory is the numbered transcript of the messages. It keeps no running summary.
    """

    name = "offline"
    attachments: frozenset[str] = frozenset()

    def extract(self, context: Context) -> tuple[list[Fact], Usage]:
        speaker = "assistant" if context.about_agent else "user"
        facts: list[Fact] = []
        seen: set[str] = set()
        for turn in context.new_messages:
            if turn.role != speaker or turn.part is not None:  # text only: parts are skipped
                continue
            for sentence in SENTENCE.split(turn.content.strip()):
                text = GREETING.sub("", sentence.strip())
                text = text[:1].upper() + text[1:]
                key = text.lower().rstrip(".!")
                if (
                    (len(text.split()) < 2 and len(CJK.findall(text)) < CJK_STATEMENT)
                    or text.endswith(QUESTION)
                    or key in FILLERS
                    or not (context.about_agent or first_person(text) or ABOUT_USER.match(text))
                    or key in seen
                ):
                    continue
                seen.add(key)
                facts.append(Fact(text, None, 1.0, (turn.position,)))
        return facts, Usage()

    def decide(
        self,
        facts: Sequence[Fact],
        existing: Sequence[Sequence[Existing]],
        observed_on: date | None = None,
    ) -> tuple[Decisions, Usage]:
        result = Decisions()
        for index, (fact, neighbours) in enumerate(zip(facts, existing, strict=True)):
            known = max(neighbours, key=lambda m: m.similarity, default=None)
            if known is not None and known.similarity >= DUPLICATE_SIMILARITY:
                result.decisions.append(Decision("NONE", index, known.id, fact.text))
            else:
                result.decisions.append(Decision("ADD", index, None, fact.text))
        return result, Usage()

    def summarize(self, previous: str, turns: Sequence[Turn]) -> tuple[str | None, Usage]:
        return None, Usage()  # no summary without a model

    def procedure(self, context: Context) -> tuple[str, Usage]:
        """The transcript itself, step by step: no summarising without a model."""
        steps = [f"{n}. {t.role}: {t.content}" for n, t in enumerate(context.new_messages, 1)]
        return "\n".join(steps), Usage()

    def entities(
        self, facts: Sequence[Fact], self_name: str | None
    ) -> tuple[list[EntityRef], Usage]:
        """The scope's own entity and the objects of the statements offline_triples reads."""
        if not self_name:
            return [], Usage()
        raw = [EntityRef(self_name, "person")]
        for fact in facts:
            raw += [
                EntityRef(dst, _offline_type(rel))
                for _, rel, dst in offline_triples(fact.text, self_name)
            ]
        return clean_entities(raw, self_name), Usage()

    def relations(
        self, facts: Sequence[Fact], entities: Sequence[EntityRef], self_name: str | None
    ) -> tuple[Relations, Usage]:
        if not self_name:
            return Relations(), Usage()
        raw = [
            Triple(src, rel, dst, index)
            for index, fact in enumerate(facts)
            for src, rel, dst in offline_triples(fact.text, self_name)
        ]
        return clean_relations(raw, entities, self_name, len(facts)), Usage()

    def contradictions(
        self, triples: Sequence[Triple], edges: Sequence[KnownEdge]
    ) -> tuple[Contradictions, Usage]:
        """A new value of an exclusive relationship (a place, employer, job, spouse, partner,
        parent or boss) ends the old one; dislikes ends likes, and back."""
        result = Contradictions()
        for edge in edges:
            for triple in triples:
                if triple.source.lower() != edge.source.lower():
                    continue
                same_end = triple.destination.lower() == edge.destination.lower()
                if (edge.relationship == triple.relationship in EXCLUSIVE and not same_end) or (
                    OPPOSITE.get(triple.relationship) == edge.relationship and same_end
                ):
                    result.edge_ids.append(edge.id)
                    break
        return result, Usage()


def _offline_type(relationship: str) -> str:
    if relationship in ("lives_in",):
        return "location"
    if relationship in ("works_at",):
        return "organization"
    if relationship.startswith("has_") or relationship == "married_to":
        return "pet" if relationship in ("has_dog", "has_cat", "has_pet") else "person"
    return ""
