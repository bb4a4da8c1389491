"""The local entity recogniser (memory.text.recognise): pure functions, no database."""

from __future__ import annotations

from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from memory.graph import normalise_name
from memory.text.recognise import (
    MAX_ENTITIES,
    MAX_NAME,
    MAX_QUERY_WORDS,
    known_names,
    mentions_self,
    normalise,
    query_names,
    query_words,
    recognise,
    self_entity,
)


def names(text: str, known: tuple[str, ...] = ()) -> list[str]:
    return [name for name, _ in recognise(text, known)]


def test_it_finds_proper_noun_phrases_but_not_capitalised_sentence_starters() -> None:
    text = (
        "Yesterday Caroline took the kids to the Museum of Modern Art in New York. "
        "Thanks! The trip was great. Painting is fun."
    )
    assert names(text) == ["Caroline", "Museum of Modern Art", "New York"]


def test_a_sentence_may_start_with_a_name() -> None:
    assert names("[1:56 pm on 8 May, 2023] Melanie: I went running.") == ["Melanie"]


def test_calendar_words_and_possessives() -> None:
    assert names("On Monday in May, Melanie's kids met Jon\u2019s dog.") == ["Melanie", "Jon"]


def test_it_finds_acronyms_and_quoted_titles_with_types() -> None:
    found = recognise('I joined an LGBTQ group at NASA and read "Charlotte\'s Web" twice.')
    assert found == [("LGBTQ", "acronym"), ("NASA", "acronym"), ("Charlotte's Web", "work")]


def test_type_guesses_from_suffixes() -> None:
    found = dict(recognise("She works at Acme Corporation near Lake Tahoe with Sam Jones."))
    assert found == {"Acme Corporation": "organization", "Lake Tahoe": "location", "Sam Jones": ""}


def test_it_finds_known_names_as_whole_words_in_any_case() -> None:
    known = ("python", "New York", "go")
    assert names("i code in python in new york", known) == ["python", "New York"]
    # Whole words only: "pythonic" and "gopher" are not "python" and "go".
    assert names("pythonic gopher", known) == []
    # A possessive still names the entity.
    assert names("python's typing", known) == ["python"]


def test_known_names_may_be_prepared_once() -> None:
    prepared = known_names(["Python", "rust lang", "  "])
    assert prepared == {"python": "Python", "rust lang": "rust lang"}
    assert recognise("rust lang and python", prepared) == [("rust lang", ""), ("Python", "")]


def test_self_references() -> None:
    assert mentions_self("I like tea") and mentions_self("this is mine")
    assert mentions_self("i\u2019m here")
    assert not mentions_self("Iceland is cold; Imogen likes it")
    assert self_entity({"user_id": "alice", "agent_id": "bot"}) == "alice"
    assert self_entity({"user_id": None, "agent_id": "bot"}) == "bot"
    assert self_entity({"user_id": None, "agent_id": None, "run_id": "r1"}) is None


def test_query_names_include_word_runs_for_the_database_to_match() -> None:
    found = query_names("What do Melanie's kids like about the support group in 2023?")
    assert found[0] == "melanie"
    assert {"kids", "support group", "support", "group"} <= set(found)
    assert not {"what", "the", "2023", "like"} & set(found)


def test_query_words_leave_out_the_names_the_query_says() -> None:
    # Melanie and New York are names (matched by name); stop words and numbers are no words.
    found = query_words("Which cities has Melanie's family visited in New York in 2023?")
    assert found == ["cities", "family", "visited"]
    many = " ".join(f"w{chr(97 + i % 26)}{chr(97 + i // 26)}" for i in range(40))
    assert query_words(many) == many.split()[:MAX_QUERY_WORDS]


def test_its_normalisation_is_the_graphs() -> None:
    for text in ("  New   York ", "ÉCOLE\tde Paris", "a\nb"):
        assert normalise(text) == normalise_name(text)


HOSTILE = [
    "$$",
    "a $$ b $$ Name",
    "}) DETACH DELETE n //",
    "'); DROP TABLE memory_memory; --",
    "\"unterminated 'quote",
    "emoji 🦜🧠 Zürich 東京 Łódź עברית \u202e override",
    "A" * 10_000,
    "Word " * 2_000,
    "“" * 5_000,
]


def test_hostile_text_is_only_text() -> None:
    assert names("}) DETACH DELETE n //") == ["DETACH DELETE"]
    assert names("emoji 🦜🧠 Zürich 東京 Łódź") == ["Zürich", "Łódź"]
    for text in HOSTILE:
        found = recognise(text, known=("$$", "name", "}) detach"))
        assert len(found) <= MAX_ENTITIES
        assert all(0 < len(name) <= MAX_NAME and isinstance(kind, str) for name, kind in found)


@hypothesis_settings(max_examples=300, deadline=None)
@given(
    st.text(max_size=3_000),
    st.lists(st.text(max_size=40), max_size=20),
)
def test_it_never_raises_and_its_output_is_bounded(text: str, known: list[str]) -> None:
    found = recognise(text, known)
    assert len(found) <= MAX_ENTITIES
    keys = [normalise(name) for name, _ in found]
    assert len(set(keys)) == len(keys) and all(keys)
    assert all(len(name) <= MAX_NAME for name, _ in found)
    assert len(query_names(text)) <= 4 * MAX_ENTITIES
    assert recognise(text, known) == found  # deterministic
