"""Inside a scope, the names its own user goes by count like stop words (memory.search.prepare,
memory.queries.own_names, memory.text.recognise.own_names, memory.text.query.neutralise)."""

# ruff: noqa: RUF001 (names in other scripts)

from __future__ import annotations

import importlib
from typing import Any, ClassVar
from unittest import mock

import pytest
from django.db import connection

from memory import graph, queries
from memory import search as searching
from memory.models import Memory
from memory.queries.relations import OWN_NAME_PREDICATE
from memory.retrieval.filters import compile_filters
from memory.text import query as query_module
from memory.text.embeddings import embed_query
from memory.text.query import first_person, literal, neutralise
from memory.text.recognise import own_names
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import add_texts

DANA = [
    "My name is Dana.",
    "I moved to Porto last year and rent a flat near the river.",
    "On weekends I play the cello with a small amateur orchestra.",
    "We have a grey cat called Pixel.",
    "I'm a nurse on the children's ward at a hospital downtown.",
    "My sister is called Ana and she teaches in Denver.",
    "I'm allergic to peanuts, so I always check labels.",
    "Dana's favourite food is grilled sardines.",
]


# bench/data/assistant-heldout.json's Ingrid: first-person facts, her name said in one.
INGRID = [
    "We have a family cabin on the island of Senja.",
    "I work two weeks on board, then get two weeks off.",
    "I studied marine engineering at the maritime college in Ålesund.",
    "My birthday is on Midsummer Eve.",
    "On board I sleep in four-hour blocks.",
    "Someday I want to sail to Svalbard on my own.",
    "I photograph the northern lights on clear winter nights.",
    "I ran three marathons before my knee gave out.",
    "I play the accordion badly at family gatherings.",
    "I own a small wooden sailboat named Frøya.",
    "I have an elderly husky called Kaja.",
    "Since 2017 I've been chief engineer on a coastal express ship.",
    "I can't stand lutefisk, even at Christmas.",
    "I drink far too much filter coffee, maybe eight cups a day.",
    "I lived in Stavanger while I worked offshore.",
    "I swim in the fjord even in January.",
    "My ex-husband Per still lives in Stavanger with his new family.",
    "Milk doesn't agree with me; I'm lactose intolerant.",
    "My son Jonas studies mechanical engineering in Trondheim.",
    "I'm fifty-two and was born in Bergen.",
    "I speak Norwegian, English and some Russian picked up in port.",
    "These days I cross-country ski instead, often at night under floodlights.",
    "I drive a Tesla Model Y, like half of Norway.",
    "My signature dish is fish soup with a little saffron.",
    "Home is now a small red house in Tromsø.",
    "Ingrid Halvorsen is my name.",
    "My partner Lars works on a fishing boat out of Hammerfest.",
    "I read Jo Nesbø thrillers between watches.",
    "I spent fifteen years as a mechanic on North Sea oil platforms.",
    "My mother is 81 and lives in a care home in Bergen.",
]


NAMING = [
    ("My name is Dana.", ["dana"]),
    ("my name's Søren, with the slashed o", ["søren"]),
    ("My name is Mary Jane Watson, hi", ["mary jane watson", "mary jane", "mary", "jane watson"]),
    # A full name: the first name alone too, and a given name after a family name; not a
    # surname alone (a relative shares it).
    ("My name is Ahmet Yilmaz.", ["ahmet yilmaz", "ahmet"]),
    (
        "My name is Tan Mei Ling, and Tan is my surname.",
        ["tan mei ling", "tan mei", "tan", "mei ling"],
    ),
    # The name first; a word that is usually a stop word, as the first of two.
    ("Ingrid Halvorsen is my name.", ["ingrid halvorsen", "ingrid"]),
    ("So Ingrid is my first name", ["ingrid"]),
    ("I'm Hope Pritchard, Hope just like the word.", ["hope pritchard", "hope"]),
    ("Everyone calls me Mary Jane, never just Mary.", ["mary jane", "mary"]),
    ("I go by Bart at work", ["bart"]),
    ("I'm Oluwaseun, but my friends just say Seun.", ["oluwaseun"]),
    ("Hi, I am Theo and I like tea", ["theo"]),
    ("User's name is Bartholomew.", ["bartholomew"]),
    ("User goes by Dee.", ["dee"]),
    ("Name is Rose", ["rose"]),
    # A note's label at its start, as a support agent or a work assistant writes one.
    ("Customer name: Uwe Brandt", ["uwe brandt", "uwe"]),
    ("Name: Juan Pablo Ferreyra", ["juan pablo ferreyra", "juan pablo", "juan", "pablo ferreyra"]),
    ("Full name Will Brennan; originally from Cork", ["will brennan", "will"]),
    ("Client name: Bill Gallagher, owner of Gallagher Plumbing", ["bill gallagher", "bill"]),
    # Other languages (issue #49): the name after their forms; without case (Arabic, Hindi) to
    # punctuation or the copula; Chinese, Japanese and Korean names as runs of two to four
    # characters with the given name alone.
    ("Ich heiße Katrin Vogel, die meisten nennen mich aber Kati.", ["katrin vogel", "katrin"]),
    ("Me llamo Rodrigo Salcedo, pero todos me dicen Ro.", ["rodrigo salcedo", "rodrigo"]),
    ("Je m'appelle Geneviève Tremblay.", ["geneviève tremblay", "geneviève"]),
    ("Меня зовут Дмитрий Ковалёв, мне 41 год.", ["дмитрий ковалёв", "дмитрий"]),
    ("اسمي سلمى الخطيب، وعمري 29 سنة.", ["سلمى الخطيب", "سلمى"]),
    ("मेरा नाम रोहित श्रीवास्तव है, उम्र 24 साल।", ["रोहित श्रीवास्तव", "रोहित"]),
    ("我叫林晓雯，朋友们都叫我小雯。", ["林晓雯", "林晓", "晓雯"]),
    ("名前は中村大輔。昭和36年生まれです。", ["中村大輔", "中村大", "中村", "大輔"]),
    (
        "佐藤美咲です。友達からは「みさっち」って呼ばれています。",
        ["佐藤美咲", "佐藤美", "佐藤", "美咲"],
    ),
    ("제 이름은 김지우예요. 부산 토박이예요.", ["김지우", "김지", "지우"]),
    ("Meine Schwester heißt Anja.", []),
    ("我妹妹叫小雨。", []),
    # Not the first person's name: another's, or no name at all.
    ("My sister is called Ana.", []),
    ("My dog's name is Rex.", []),
    ("My name is not important.", []),
    ("I'm tired.", []),
    ("I'm a nurse.", []),
    ("I'm from Berlin.", []),
    ("I'm going to Paris.", []),
    ("This is my name.", []),
    ("Product name: Glasfaser 500", []),  # a label, not the person's
    ("Customer number: EF-4471902", []),
    ("Called the customer: Anna answered", []),  # a label only at the note's start
    ("I'm Hope.", []),  # one stop word alone is not read as a name
]


@pytest.mark.parametrize(("text", "names"), NAMING)
def test_own_names_reads_how_a_text_names_its_first_person(text: str, names: list[str]) -> None:
    assert own_names(text) == names


def test_neutralise_reads_a_name_as_the_subject_and_drops_it_from_the_keywords() -> None:
    assert neutralise("Where does Dana live?", {"dana"}, "the user") == (
        "Where does the user live?",
        "Where does   live?",
    )
    assert neutralise("what's DANA\u2019S cat called", {"dana"}, "the user")[0] == (
        "what's the user's cat called"
    )
    # The longest name first, across spacing; a name inside a word is not the name.
    assert neutralise("Is Mary  Jane Danish?", {"mary", "mary jane"}, "the user")[0] == (
        "Is the user Danish?"
    )
    assert neutralise("Where does Danae live?", {"dana"}, "the user") == (
        "Where does Danae live?",
        "Where does Danae live?",
    )
    assert neutralise("Where does Dana live?", set(), "the user")[0] == "Where does Dana live?"


FIRST_PERSON = [
    ("Where does Dana live?", "Where do I live?"),
    ("What's the name of Dana's pet?", "What's the name of my pet?"),
    ("Is Dana allergic to shellfish?", "Am I allergic to shellfish?"),
    ("Does Mary  Jane have a car?", "Do I have a car?"),
    ("what has DANA been reading", "what have I been reading"),
    ("Dana is a nurse, right?", "I am a nurse, right?"),
    ("Dana has a cat?", "I have a cat?"),
    ("Who did Ana go to Lisbon with Dana?", "Who did Ana go to Lisbon with me?"),
    ("What did Dana\u2019s sister say to Dana?", "What did my sister say to me?"),
    ("Isn't Dana vegetarian?", "Aren't I vegetarian?"),
    ("Where does Danae live?", "Where does Danae live?"),  # another name
    ("Does Ana know where Dana works?", "Does Ana know where I works?"),
]


@pytest.mark.parametrize(("text", "said"), FIRST_PERSON)
def test_first_person_reads_the_question_in_the_users_own_words(text: str, said: str) -> None:
    assert first_person(text, {"dana", "mary", "mary jane"}) == said


def test_first_person_reads_a_long_query_of_names() -> None:
    """A 4,000-character query of names, each after a preposition or not (read in one pass of
    the pattern: the first version looked back once per name, 106 ms for the second one)."""
    said = first_person("to Dana " * 500, {"dana"})
    assert said == "to me " * 500
    assert first_person("Dana " * 800, {"dana"}).split() == ["I"] * 800


class OwnNamesTestCase(BaseTestCase):
    memories: ClassVar[list[Memory]]

    @classmethod
    def setUpTestData(cls) -> None:
        super().setUpTestData()
        project = cls.alice.key.project
        with project_context(project.pk):
            cls.memories = add_texts(project, DANA, user_id="dana")
            bob = add_texts(project, ["I live in Austin.", "I love tacos."], user_id="bob")
            erik = add_texts(project, ["I live in Oslo."], user_id="erik")
        graph.link_mentions(project.pk, [m.pk for m in [*cls.memories, *bob, *erik]])

    def first(self, query: str, user_id: Any = "dana") -> str:
        """The best result, at threshold 0: what is tested here is the order."""
        body = {"query": query, "filters": {"user_id": user_id}, "threshold": 0}
        response = self.call("post", "/v3/memories/search/", body)
        assert response.status_code == 200, response.content
        return str(response.json()["results"][0]["memory"])

    def test_a_question_naming_the_user_ranks_by_the_rest_of_the_question(self) -> None:
        expected = {
            "Where does Dana live?": DANA[1],
            "What instrument does Dana play?": DANA[2],
            "What's the name of Dana's cat?": DANA[3],
            "What does Dana do for work?": DANA[4],
            "Is Dana allergic to anything?": DANA[6],
        }
        for query, fact in expected.items():
            assert self.first(query) == fact, query

    def test_a_full_name_and_a_name_given_first_are_the_users_too(self) -> None:
        project = self.alice.key.project
        people = {
            "ahmet": ["My name is Ahmet Yilmaz.", "I design bridges for an engineering firm."],
            "meiling": ["My name is Tan Mei Ling.", "I run a pharmacy on Penang Road."],
            "ingrid": ["Ingrid Halvorsen is my name.", "I'm chief engineer on a coastal ferry."],
            "hope": ["I'm Hope Pritchard.", "I taught biology at a secondary school."],
        }
        with project_context(project.pk):
            added = [
                m for user, texts in people.items() for m in add_texts(project, texts, user_id=user)
            ]
        graph.link_mentions(project.pk, [m.pk for m in added])
        for user, question in [
            ("ahmet", "What does Ahmet do for work?"),
            ("meiling", "What does Mei Ling do for work?"),
            ("ingrid", "What does Ingrid do for work?"),
            ("hope", "What did Hope do for work?"),
        ]:
            assert self.first(question, user) == people[user][1], question
            query = self.analysed(user, question)
            assert query.own_names and "work" in query.keywords, question

    def test_a_question_naming_the_user_is_read_in_her_own_words_too(self) -> None:
        project = self.alice.key.project
        with project_context(project.pk):
            added = add_texts(project, INGRID, user_id="ingrid")
        graph.link_mentions(project.pk, [m.pk for m in added])
        expected = {
            "What is Ingrid's job?": {INGRID[11]},
            "How does Ingrid keep fit these days?": {INGRID[15], INGRID[21]},
        }
        for question, answers in expected.items():
            assert self.first(question, "ingrid") in answers, question
        # Read only as about "the user", at least one of them ranks another fact first: the
        # questions tell the two readings apart.
        with mock.patch.object(
            query_module, "first_person", lambda text, names: neutralise(text, names, "the user")[0]
        ):
            firsts = {q: self.first(q, "ingrid") for q in expected}
        assert any(firsts[q] not in answers for q, answers in expected.items()), firsts

    def test_a_question_about_the_name_still_finds_it(self) -> None:
        assert self.first("What is Dana's name?") == DANA[0]

    def test_the_scope_id_is_an_own_name_too(self) -> None:
        assert self.first("where does bob live", "bob") == "I live in Austin."
        query = self.analysed("bob", "Where does Bob live?")
        assert "bob" not in query.names and "Bob" not in query.keywords

    def test_only_the_scopes_own_names_and_only_in_a_pinned_scope(self) -> None:
        project = self.alice.key.project_id
        # Ana is Dana's sister: her name keeps its weight in Dana's scope.
        assert "ana" in self.analysed("dana", "What does Ana do?").names
        assert self.first("What does Ana do?") == DANA[5]
        # Erik's scope: "Dana" is someone else there.
        assert "dana" in self.analysed("erik", "Who is Dana?").names
        # A search across users: the name tells them apart.
        everyone = queries.matching(project, compile_filters({"user_id": "*"}))
        assert "dana" in self.analysed(everyone, "Where does Dana live?").names
        with project_context(project):
            assert queries.own_names(project, {"user_id": "dana"}, ["dana", "ana", "porto"]) == {
                "dana"
            }

    def test_every_signal_reads_the_neutral_question(self) -> None:
        query = self.analysed("dana", "Dana's cat?")
        assert (query.keywords.strip(" ?"), query.names) == ("cat", ("cat",))
        # Read both ways: about the user, and in the user's own words.
        assert query.vector == literal(embed_query("the user's cat?", "my cat?"))
        assert query.vector != literal(embed_query("the user's cat?"))
        assert query.own_names == frozenset({"dana"})

    def test_with_a_hosted_embedder_the_names_are_read_before_the_transaction(self) -> None:
        memories = self.scope("dana")
        with mock.patch.object(searching, "in_process", return_value=False):
            query = searching.prepare(self.alice.key.project_id, memories, "Dana's cat?")
        assert query.own_names == frozenset({"dana"}) and query.keywords.strip(" ?") == "cat"
        project = self.alice.key.project_id
        with mock.patch.object(queries, "own_names") as read, project_context(project):
            assert searching.own_names(project, memories, query) is query  # nothing read again
        read.assert_not_called()

    def analysed(self, scope: Any, text: str) -> Any:
        """The query as search() ranks it in `scope` (a user id, or memories)."""
        project = self.alice.key.project_id
        memories = self.scope(scope) if isinstance(scope, str) else scope
        with project_context(project):
            return searching.own_names(
                project, memories, searching.prepare(project, memories, text)
            )

    def test_the_partial_index_holds_every_naming_memory(self) -> None:
        migration = importlib.import_module("memory.migrations.0034_own_name_index_languages")
        assert migration.PREDICATE == OWN_NAME_PREDICATE  # else the planner ignores the index
        naming = [text for text, names in NAMING if names]
        sql = f"SELECT {OWN_NAME_PREDICATE} FROM (SELECT %s::text AS text, 'active' AS state) m"  # noqa: S608
        with connection.cursor() as cursor:
            for text in naming:
                cursor.execute(sql, [text])
                assert cursor.fetchone()[0], text

    def scope(self, user_id: str) -> Any:
        return queries.matching(self.alice.key.project_id, compile_filters({"user_id": user_id}))
