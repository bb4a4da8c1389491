"""Extraction in the messages' language (issue #49), through the model faked at the HTTP
boundary: the prompt asks for the messages' language, a Chinese message updates a Chinese
memory (history kept, the new text's language detected), and the graph stores entities and
relations whose names are Cyrillic or Chinese (Cypher parameters, never text)."""

# ruff: noqa: RUF001 (text in other scripts)

from __future__ import annotations

from memory import graph
from memory.extraction.llm.offline import OfflineExtractor
from memory.models import MemoryHistory
from tenants.db import project_context
from tests.memory.test_graph_extraction import ALICE, edges, entities, relations
from tests.memory.test_pipeline import ExtractionTestCase, add, decisions, facts


class ExtractionInOtherLanguagesTestCase(ExtractionTestCase):
    def prompt_of(self, tool: str) -> str:
        request = next(r for r in self.fake.requests if r["tool"] == tool)
        return f"{request['system']}\n{request['prompt']}"

    def test_a_chinese_message_updates_a_chinese_memory_in_chinese(self) -> None:
        old = self.existing("用户住在成都")
        update = {"fact": 0, "event": "UPDATE", "id": "0", "text": "用户住在深圳"}
        self.fake.script(facts("用户今年三月搬到了深圳"), decisions(update))
        done = self.run_event(self.event("我今年三月从成都搬到了深圳。"))
        assert done.status == "SUCCEEDED"
        # The model was given the message as it was said, and asked to keep its language.
        extract = self.prompt_of("record_facts")
        assert "我今年三月从成都搬到了深圳。" in extract
        assert "language" in extract.lower()
        [new] = self.memories(state="active")
        assert (new.text, new.language) == ("用户住在深圳", "zh")
        with project_context(self.project.pk):
            row = MemoryHistory.objects.get(memory_id=old.id, event="UPDATE")
        assert (row.old_memory, row.new_memory) == ("用户住在成都", "用户住在深圳")

    def test_entities_and_relations_in_other_scripts_are_stored_as_given(self) -> None:
        self.fake.script(
            facts("Пользователь живёт в Новосибирске", "用户的妹妹在杭州工作"),
            add(),
            entities(("Пользователь", "person"), ("Новосибирск", "location"), ("杭州", "location")),
            relations(
                ("Пользователь", "живёт в", "Новосибирск", 0), ("Пользователь", "妹妹在", "杭州", 1)
            ),
        )  # fmt: skip
        done = self.run_event(self.event("Я живу в Новосибирске, а моя сестра работает в Ханчжоу."))
        assert done.status == "SUCCEEDED", done.error
        found = edges(self.project.pk)
        assert ("alice", "живёт_в", "новосибирск", True) in found, found
        assert any(d == "杭州" for _, _, d, _ in found), found
        city = graph.find_entity(self.project.pk, ALICE, "Новосибирск")
        assert city is not None and city.display_name == "Новосибирск"
        # A name with a quote and Cypher's syntax in it is a parameter like any other.
        hostile = "Ро'бер`т}) DETACH DELETE (n"
        self.fake.script(
            facts(f"Пользователь дружит с {hostile}"),
            add(),
            entities(("Пользователь", "person"), (hostile, "person")),
            relations(("Пользователь", "дружит с", hostile, 0)),
        )  # fmt: skip
        assert self.run_event(self.event(f"Я дружу с {hostile}.")).status == "SUCCEEDED"
        after = edges(self.project.pk)
        assert found <= after and any(d == hostile.lower() for _, _, d, _ in after), after


class OfflineInOtherLanguagesTestCase(ExtractionTestCase):
    """The offline extractor (no model) keeps first-person statements in other languages,
    cuts Chinese and Japanese at their full stops, and a new home in German, Russian, Chinese,
    Japanese or Korean supersedes the memory that stated only the old one, as in English."""

    MOVES = [
        ("Ich wohne in Köln.", "Ich wohne jetzt in Leipzig."),
        ("Я живу в Казани.", "Я теперь живу в Новосибирске."),
        ("我住在成都。", "我现在住在深圳。"),
        ("東京に住んでいます。", "今は福岡に住んでいます。"),
        ("저는 서울에 살아요.", "이제 부산에 살아요."),
    ]

    def test_first_person_statements_are_kept_sentence_by_sentence(self) -> None:
        done = self.run_event(
            self.event(
                "我叫林晓雯。我对花生过敏！你好吗？", "Hallo! Ich spiele Cello. Was gibt's?"
            ),
            OfflineExtractor(),
        )
        assert done.status == "SUCCEEDED"
        assert [m.text for m in self.memories()] == [
            "我叫林晓雯。",
            "我对花生过敏！",
            "Ich spiele Cello.",
        ]

    def test_a_new_home_supersedes_the_old_one_in_each_language(self) -> None:
        for index, (old, new) in enumerate(self.MOVES):
            with self.subTest(old):
                scope = {
                    "user_id": f"mover{index}",
                    "agent_id": None,
                    "app_id": None,
                    "run_id": None,
                }
                self.run_event(self.event(old, scope=scope), OfflineExtractor())
                self.run_event(self.event(new, scope=scope), OfflineExtractor())
                by_text = {m.text: m for m in self.memories(user_id=f"mover{index}")}
                assert set(by_text) == {old, new}, by_text
                assert (by_text[old].state, by_text[old].replaced_by_id) == (
                    "superseded",
                    by_text[new].id,
                )
                assert by_text[new].state == "active"
