"""The entities and relations a model (or the offline reader) found, cleaned the same way for
every extractor: self-references ("User", "I", "me") resolved to the scope's own entity, names
that were not listed and facts that were not shown dropped with a note, duplicates merged.

May import llm.types only.
"""

from __future__ import annotations

from collections.abc import Sequence

from memory.extraction.llm.types import EntityRef, Relations, Triple

# The user, as extraction prompts name it ("User") and as a model writing in the messages'
# language may: German, Spanish, French, Italian, Portuguese, Dutch, Russian, Arabic, Hindi,
# Chinese, Japanese, Korean.
SELF_WORDS = frozenset({
    "user", "the user", "i", "me", "my", "myself", "mine", "benutzer", "der benutzer", "nutzer",
    "der nutzer", "nutzerin", "die nutzerin", "ich", "usuario", "el usuario", "usuaria",
    "la usuaria", "yo", "utilisateur", "l'utilisateur", "utilisatrice", "l'utilisatrice", "je",
    "moi", "utente", "l'utente", "usuário", "o usuário", "gebruiker", "de gebruiker",
    "пользователь", "пользовательница", "я", "المستخدم", "المستخدمة", "أنا", "उपयोगकर्ता", "मैं",
    "用户", "用戶", "我", "ユーザー", "私", "사용자", "나", "저",
})  # fmt: skip


def self_reference(name: str, self_name: str | None) -> str | None:
    """The entity a name stands for: the scope's own entity for "User" / "I" / "me" (None when
    the scope has none), else the name itself."""
    if " ".join(name.split()).lower() in SELF_WORDS:
        return self_name
    return name.strip()


def clean_entities(raw: Sequence[EntityRef], self_name: str | None) -> list[EntityRef]:
    """Self-references resolved, blanks dropped, one per normalised name (the first kept)."""
    found: dict[str, EntityRef] = {}
    for entity in raw:
        name = self_reference(entity.name, self_name)
        if not name or not name.strip():
            continue
        kind = "person" if name == self_name and entity.name != self_name else entity.type
        found.setdefault(" ".join(name.split()).lower(), EntityRef(name, kind.strip().lower()))
    if self_name and " ".join(self_name.split()).lower() not in found:
        found[" ".join(self_name.split()).lower()] = EntityRef(self_name, "person")
    return list(found.values())


def clean_relations(
    raw: Sequence[Triple],
    entities: Sequence[EntityRef],
    self_name: str | None,
    facts: int,
) -> Relations:
    """Keep the triples among the listed entities that cite a fact shown; say why others went."""
    listed = {" ".join(e.name.split()).lower(): e.name for e in entities}
    result = Relations()
    seen: set[tuple[str, str, str]] = set()
    for triple in raw:
        ends = []
        for end in (triple.source, triple.destination):
            name = self_reference(end, self_name)
            ends.append(listed.get(" ".join((name or "").split()).lower()))
        relationship = "_".join(triple.relationship.split()).lower()
        if ends[0] is None or ends[1] is None:
            result.rejected.append(
                f"relation {triple.source!r} -> {triple.destination!r} names "
                "an entity that was not listed"
            )
            continue
        if triple.fact >= facts:
            result.rejected.append(f"relation cites unknown fact {triple.fact}")
            continue
        key = (ends[0].lower(), relationship, ends[1].lower())
        if not relationship or ends[0].lower() == ends[1].lower() or key in seen:
            continue
        seen.add(key)
        result.triples.append(Triple(ends[0], relationship, ends[1], triple.fact))
    return result
