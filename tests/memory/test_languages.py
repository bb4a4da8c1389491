"""Keywords in each memory's language (issue #49): each memory's language is detected when its
text is written, its tsvector stems it with PostgreSQL's configuration for that language, and
Chinese, Japanese and Korean are cut into character pairs, for the stored memories and the
queries alike. Through the real add and update actions, the real text-search configurations and
the search statement."""

# ruff: noqa: RUF001, E501 (text in other scripts and languages, one case per line)

from __future__ import annotations

from typing import Any

from django.db import connection
from django.test import override_settings

from memory import actions, queries
from memory import search as searching
from memory.models import Memory
from memory.queries import scope_memories
from memory.retrieval.filters import compile_filters
from memory.retrieval.search import hybrid_search
from memory.text.language import CONFIGURATIONS, detect
from memory.text.query import analyse
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import add_texts, auth

# (language, a memory, a question that shares a word with it only once both are stemmed or cut
# into character pairs, a memory of the same scope that shares none)
CASES = [
    ("de", "Ich wohne seit zwei Jahren in alten Häusern am Rhein.", "Welches Haus?", "Mein Hund heißt Bello."),
    ("es", "Trabajé como enfermera en hospitales públicos.", "¿Dónde trabaja como enfermera?", "Me gusta el café."),
    ("fr", "J'habitais à Lyon avec mes enfants.", "Où habite-t-elle avec son enfant ?", "Le chat dort."),
    ("ru", "Я работала медсестрой в детской больнице.", "Где она работает?", "У меня есть кошка."),
    ("zh", "我在杭州的一家电商公司工作。", "他住在杭州吗？", "我喜欢喝绿茶。"),
    ("ja", "毎朝六時に起きて犬の散歩をしています。", "散歩はいつですか？", "猫が大好き。"),
    ("ko", "부산에 있는 대학병원에서 간호사로 일해요.", "간호사로 일하나요?", "고양이를 키워요."),
    ("en", "I worked as a nurse in two hospitals.", "Which hospital does she work at?", "I like tea."),
]  # fmt: skip


def scope_of(user: str) -> dict[str, str | None]:
    return {"user_id": user, "agent_id": None, "app_id": None, "run_id": None}


class DetectTestCase(BaseTestCase):
    def test_each_language_of_the_cases_is_detected(self) -> None:
        for language, memory, _question, other in CASES:
            with self.subTest(language):
                assert detect(memory) == language
                assert detect(other) == language or len(other) < 20

    @override_settings(ENGRAM_DEFAULT_LANGUAGE="de")
    def test_a_text_it_cannot_place_takes_the_deployment_default(self) -> None:
        assert detect("Berlin") == "de"
        assert detect("12:30 / 42") == "de"
        assert detect("Wo wohnt Jürgen? Ich wohne in Leipzig.") == "de"

    def test_every_configuration_exists_in_the_database(self) -> None:
        with connection.cursor() as cursor:
            for code, name in CONFIGURATIONS.items():
                cursor.execute("SELECT engram_text_config(%s)::text", [code])
                assert cursor.fetchone()[0] == name
            cursor.execute("SELECT engram_text_config('zh')::text, engram_text_config('')::text")
            assert cursor.fetchone() == ("simple", "simple")

    def test_cjk_runs_are_cut_into_pairs_and_other_text_left_alone(self) -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT engram_keyword_text(%s), engram_keyword_text(%s), engram_keyword_text(%s)",
                ["王磊在杭州。Hello 犬", "Plain English, untouched.", "서울에 살아요"],
            )
            mixed, plain, korean = cursor.fetchone()
        assert mixed.split() == ["王磊", "磊在", "在杭", "杭州", "。Hello", "犬"]
        assert plain == "Plain English, untouched."
        assert korean.split() == ["서울", "울에", "살아", "아요"]


@override_settings(ENGRAM_CONVERSATION_GAP_SECONDS=0)
class KeywordsPerLanguageTestCase(BaseTestCase):
    def setUp(self) -> None:
        super().setUp()
        self.project = self.alice.key.project

    def bm25(self, user: str, question: str) -> dict[str, float]:
        with project_context(self.project.pk):
            hits = hybrid_search(
                scope_memories(self.project.pk, scope_of(user)).active(),
                analyse(question),
                top_k=10,
                threshold=0,
            )
        return {h.memory.text: h.score.bm25 for h in hits}

    def test_a_memory_matches_its_question_in_its_own_language(self) -> None:
        for language, memory, question, other in CASES:
            with self.subTest(language):
                user = f"user-{language}"
                with project_context(self.project.pk):
                    stored = add_texts(self.project, [memory], user_id=user)
                    add_texts(self.project, [other], user_id=user)
                assert stored[0].language == language
                scores = self.bm25(user, question)
                assert scores[memory] > 0, (language, scores)
                assert scores.get(other, 0) == 0, (language, scores)

    def test_an_edit_detects_the_new_texts_language_and_rebuilds_its_keywords(self) -> None:
        with project_context(self.project.pk):
            (memory,) = add_texts(self.project, ["I like green tea."], user_id="editor")
        assert memory.language == "en"
        assert self.bm25("editor", "杭州") == {"I like green tea.": 0.0}
        updated = actions.do_update_memory(
            memory, actor="test", text="我在杭州的一家电商公司工作。"
        ).memory
        assert updated.language == "zh"
        with project_context(self.project.pk):
            stored = Memory.objects.get(pk=memory.pk)
        assert stored.language == "zh"
        assert self.bm25("editor", "杭州")["我在杭州的一家电商公司工作。"] > 0


@override_settings(ENGRAM_CONVERSATION_GAP_SECONDS=0)  # each text its own conversation
class ForeignLanguageTestCase(BaseTestCase):
    """The English model asked in another script answers with keyword matches only, and says
    so in the body (`warning`) and a header; an English question, or one in Latin letters it
    cannot be sure of, is answered as before."""

    def setUp(self) -> None:
        super().setUp()
        project = self.alice.key.project
        with project_context(project.pk):
            for text in ("我在杭州的一家电商公司工作。", "我喜欢喝绿茶。", "I work as a nurse."):
                add_texts(project, [text], user_id="mei")

    def search(self, query: str, threshold: float = 0) -> Any:
        return self.client.post(
            "/v3/memories/search/",
            {"query": query, "filters": {"user_id": "mei"}, "threshold": threshold},
            content_type="application/json",
            headers=auth(self.alice.raw),
        )

    def test_a_chinese_query_of_the_english_model_returns_its_keyword_matches_only(self) -> None:
        response = self.search("她在杭州做什么工作？")
        body = response.json()
        assert [r["memory"] for r in body["results"]] == ["我在杭州的一家电商公司工作。"]
        assert "'zh'" in body["warning"] and "all-MiniLM-L6-v2" in body["warning"]
        assert response.headers["Engram-Foreign-Language"] == "zh"
        # Nothing shares a word with it: nothing is returned, even at threshold 0.
        nothing = self.search("她养猫吗？").json()
        assert nothing["results"] == [] and nothing["nothing_relevant"] is True
        assert nothing["best_score"] == 0.0  # not the 0.9 its cosines would have claimed

    def test_an_english_or_an_uncertain_latin_query_is_answered_as_before(self) -> None:
        for query in ("What does she do for a living?", "Does Søren play chess?"):
            response = self.search(query)
            body = response.json()
            assert "warning" not in body, query
            assert "Engram-Foreign-Language" not in response.headers, query
            assert len(body["results"]) == 3, query


class OwnNamesPerLanguageTestCase(BaseTestCase):
    """A question naming the scope's own user in another language reads the name as the user,
    as an English one does (memory.text.recognise own_names, the partial index of naming
    memories): the memory that only says the name no longer matches it by keyword."""

    CASES = [
        ("katrin", "Ich heiße Katrin Vogel.", "Womit verdient Katrin ihr Geld?", {"katrin"}),
        ("rodrigo", "Me llamo Rodrigo Salcedo.", "¿A qué se dedica Rodrigo?", {"rodrigo"}),
        ("dmitri", "Меня зовут Дмитрий Ковалёв.", "Где живёт Дмитрий?", {"дмитрий"}),
        ("salma", "اسمي سلمى الخطيب، وعمري 29 سنة.", "أين تقيم سلمى حالياً؟", {"سلمى"}),
        ("rohit", "मेरा नाम रोहित श्रीवास्तव है।", "रोहित कहाँ रहता है?", {"रोहित"}),
        (
            "xiaowen",
            "我叫林晓雯，朋友们都叫我小雯。",
            "林晓雯是干什么的？",
            {"林晓雯", "林晓", "晓雯"},
        ),
        ("misaki", "佐藤美咲です。", "佐藤さんはどこに住んでいますか？", {"佐藤"}),
        ("jiwoo", "제 이름은 김지우예요.", "김지우 씨 직업이 뭐예요?", {"김지우", "김지", "지우"}),
        # The name inflected: Russian's genitive, German's possessive.
        ("dmitri2", "Меня зовут Дмитрий Ковалёв.", "Какая у Дмитрия профессия?", {"дмитрия"}),
        ("katrin2", "Ich heiße Katrin Vogel.", "Wie heißt Katrins Hund?", {"katrins"}),
        (
            "galina",
            "Меня зовут Галина Петровна.",
            "Где живёт сын Галины Петровны?",
            {"галины петровны", "галины"},
        ),
    ]

    def test_the_users_own_name_is_read_as_the_user_in_each_language(self) -> None:
        project = self.alice.key.project
        for user, naming, question, own in self.CASES:
            with self.subTest(user):
                with project_context(project.pk):
                    add_texts(project, [naming], user_id=user)
                memories = queries.matching(project.pk, compile_filters({"user_id": user}))
                with project_context(project.pk):
                    query = searching.own_names(
                        project.pk, memories, searching.prepare(project.pk, memories, question)
                    )
                assert query.own_names == frozenset(own)
                assert not any(name in query.keywords.lower() for name in own), query.keywords
