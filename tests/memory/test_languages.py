"""Keywords in each memory's language (issue #49): each memory's language is detected when its
text is written, its tsvector stems it with PostgreSQL's configuration for that language, and
Chinese, Japanese and Korean are cut into character pairs, for the stored memories and the
queries alike. Through the real add and update actions, the real text-search configurations and
the search statement."""

# ruff: noqa: RUF001, E501 (text in other scripts and languages, one case per line)

from __future__ import annotations

from django.db import connection
from django.test import override_settings

from memory import actions
from memory.models import Memory
from memory.queries import scope_memories
from memory.retrieval.search import hybrid_search
from memory.text.language import CONFIGURATIONS, detect
from memory.text.query import analyse
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.factory import add_texts

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
        )
        assert updated.language == "zh"
        with project_context(self.project.pk):
            stored = Memory.objects.get(pk=memory.pk)
        assert stored.language == "zh"
        assert self.bm25("editor", "杭州")["我在杭州的一家电商公司工作。"] > 0
