"""Embedders of any dimension, and `manage.py reembed` (issue #30): a deployment on the local
384-dimension model switches to a hosted 768-dimension one (the local fake embeddings API) while
it serves, resumes after a failure, picks up what was written during the build, and switches
back. Search answers throughout.

Real database, committed (the index is built CONCURRENTLY, which no transaction may hold).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.checks import run_checks
from django.core.management import CommandError, call_command
from django.db import DataError, connection
from django.test import override_settings

from memory.actions import reembed as write
from memory.extraction.claims import permanent
from memory.graph import Scope
from memory.graph.writes import _remember_names
from memory.management.commands import reembed as command
from memory.models import EmbeddingSpace
from memory.retrieval import scoring
from memory.text import embeddings
from memory.text.embeddings import EmbeddingError, OpenAICompatibleEmbedder, Space
from tenants.db import project_context
from tenants.models import Membership
from tests.factory import auth, make_key
from tests.fake_embeddings import FakeEmbeddings

MEMORIES = ["I live in Lisbon", "I play the cello every evening", "My dog is called Rex"]
VIOLIN = "I play the violin every evening"


def hosted(fake: FakeEmbeddings, **extra: Any) -> Any:
    """The settings of the fake hosted model (a process configured for it)."""
    values = {
        "ENGRAM_EMBEDDER": "openai-compatible", "ENGRAM_EMBEDDING_URL": fake.url,
        "ENGRAM_EMBEDDING_MODEL": "fake-768", "EMBEDDING_DIMENSIONS": 768,
        "ENGRAM_EMBEDDING_CHECK_SECONDS": 0,
    }  # fmt: skip
    return override_settings(**{**values, **extra})


@pytest.fixture(autouse=True)
def _installed(committed_db: None) -> Iterator[None]:
    """The deployment as the first migrate recorded it (a committed test's flush empties the
    table), and this process on it; afterwards, back on the local model whatever happened (the
    other tests' vectors are its)."""
    if not EmbeddingSpace.objects.filter(state="current").exists():
        EmbeddingSpace.objects.create(
            name="local:all-MiniLM-L6-v2", embedder="local", dimensions=384, state="current"
        )
    with override_settings(ENGRAM_EMBEDDING_CHECK_SECONDS=0):
        embeddings.get_embedder()  # follows the recorded space
        yield
        if EmbeddingSpace.objects.filter(state="building").exists():
            reembed("--abandon")
        recorded = embeddings.recorded_space()
        if recorded is not None and not recorded.same_model(embeddings.configured_space()):
            reembed()
        embeddings.get_embedder()


def reembed(*args: str) -> str:
    out = io.StringIO()
    call_command("reembed", *args, "--no-progress", stdout=out)
    return out.getvalue()


def dimensions(project_id: Any) -> dict[str, set[int]]:
    """The dimensions of the project's vectors, and of their twins (None when missing)."""
    with project_context(project_id), connection.cursor() as cursor:
        found = {}
        for table in ("memory_memory", "memory_entityvector"):
            cursor.execute(
                f"SELECT DISTINCT vector_dims(embedding), vector_dims(embedding_next) "  # noqa: S608
                f"FROM {table} WHERE project_id = %s",
                [project_id],
            )
            rows = cursor.fetchall()
            found[table] = {r[0] for r in rows}
            found[f"{table} next"] = {r[1] for r in rows}
    return found


def stored_vector(project_id: Any, text: str) -> list[float]:
    with project_context(project_id), connection.cursor() as cursor:
        cursor.execute(
            "SELECT embedding::text FROM memory_memory WHERE project_id = %s AND text = %s",
            [project_id, text],
        )
        (value,) = cursor.fetchone()
    return [float(x) for x in value.strip("[]").split(",")]


def hnsw_index() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'memory_embedding_hnsw'")
        return str(cursor.fetchone()[0])


# What search reads of every memory of a scope is stored in the row, not in TOAST (memories 0019,
# 0021 and 0028): a column's type change resets its storage to the type's default (EXTERNAL).
IN_ROW = {"embedding": "m", "embedding_next": "m", "search_vector": "m"}


def storage() -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT attname, attstorage FROM pg_attribute "
            "WHERE attrelid = 'memory_memory'::regclass AND attname = ANY(%s) AND NOT attisdropped",
            [list(IN_ROW)],
        )
        return dict(cursor.fetchall())


class Api:
    def __init__(self, client: Any, project: str = "reembed") -> None:
        self.client, self.key = client, make_key("acme", project)
        self.project = self.key.key.project_id

    def add(self, text: str) -> str:
        body = {"messages": text, "user_id": "alice", "infer": False}
        answer = self.client.post(
            "/v3/memories/add/", body, content_type="application/json", headers=auth(self.key.raw)
        )
        assert answer.status_code == 200, answer.content
        return str(answer.json()["results"][0]["id"])

    def search(self, query: str, **filters: Any) -> Any:
        body = {"query": query, "filters": filters or {"user_id": "alice"}, "threshold": 0}
        return self.client.post(
            "/v2/memories/search/", body, content_type="application/json",
            headers=auth(self.key.raw),
        )  # fmt: skip

    def top(self, query: str, **filters: Any) -> str:
        answer = self.search(query, **filters)
        assert answer.status_code == 200, answer.content
        return str(answer.json()[0]["memory"])


def test_a_deployment_switches_models_while_it_serves_and_back(
    client: Any, fake_embeddings: FakeEmbeddings, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = Api(client)
    ids = [api.add(text) for text in MEMORIES]
    other = Api(client, "other")  # a second project: every project's vectors are switched
    other.add("I work at the harbour")
    redacted = api.add("My locker code is 4417")
    answer = client.post(
        f"/v1/memories/{redacted}/redact/", {}, content_type="application/json",
        headers=auth(api.key.raw),
    )  # fmt: skip
    assert answer.status_code == 200, answer.content
    with project_context(api.project):
        _remember_names(api.project, Scope(user_id="alice"), ["lisbon", "rex"])
    assert api.top("where do I live") == "I live in Lisbon"
    assert "vector(384)" in hnsw_index()
    assert storage() == IN_ROW  # as migrated

    # The embedding service fails part of the way: the build stops, search goes on.
    fake_embeddings.fail_after = 1
    with (
        hosted(fake_embeddings, ENGRAM_EMBEDDING_CHECK_SECONDS=3600),
        pytest.raises(EmbeddingError),
    ):
        reembed("--batch", "2")
    building = EmbeddingSpace.objects.get(state="building")
    assert (building.name, building.dimensions) == ("openai-compatible:fake-768", 768)
    half = dimensions(api.project)
    assert half["memory_memory"] == {384} and half["memory_memory next"] == {768, None}
    assert api.top("where do I live") == "I live in Lisbon"  # the old vectors serve
    status = io.StringIO()
    call_command("reembed", "--status", stdout=status)
    assert "Switch under way to openai-compatible:fake-768 (768 dimensions)" in status.getvalue()

    # Resumed: built and indexed, not switched yet; then written to while it waits.
    fake_embeddings.fail_after = None
    sent = len(fake_embeddings.requests)
    with hosted(fake_embeddings, ENGRAM_EMBEDDING_CHECK_SECONDS=3600):
        assert "Built; run reembed again" in reembed("--no-switch")
    assert all(len(r["input"]) <= 128 for r in fake_embeddings.requests[sent:])
    assert dimensions(api.project)["memory_memory next"] == {768}
    assert dimensions(api.project)["memory_entityvector next"] == {768}
    api.add("I collect vinyl records")  # the local model still embeds new memories
    changed = client.put(
        f"/v1/memories/{ids[1]}/", {"text": VIOLIN},
        content_type="application/json", headers=auth(api.key.raw),
    )  # fmt: skip
    assert changed.status_code == 200, changed.content
    assert dimensions(api.project)["memory_memory next"] == {768, None}  # the twins cleared

    # The switch: the new vectors take the old ones' place; this process follows at once.
    # (Were much written between the last pass and the lock, the switch would make another
    # pass first, rather than embed it all while it holds the tables: once here.)
    fill_last, held = write._fill_last, iter([True])

    def busy_once(*args: Any) -> None:
        if next(held, False):
            raise write.WrittenMeanwhile
        fill_last(*args)

    monkeypatch.setattr(write, "_fill_last", busy_once)
    with hosted(fake_embeddings):
        done = reembed()
        assert "one more pass first" in done
        assert "Switched: the deployment now embeds with openai-compatible:fake-768" in done
        assert embeddings.active_space().dimensions == 768
        assert api.top("vinyl records") == "I collect vinyl records"
        assert api.top("the violin") == VIOLIN
        assert api.top("Lisbon", user_id="*") == "I live in Lisbon"  # the HNSW index path
        assert api.top("where do I live") == "I live in Lisbon"
        # Stored vectors are the new model's, of the text as it is now.
        violin = stored_vector(api.project, VIOLIN)
        assert violin == pytest.approx(fake_embeddings.vector(VIOLIN), abs=1e-6)
        assert not run_checks(databases=["default"])  # these settings are the deployment's
        # The same model served elsewhere is the same model: no check fails, nothing to do.
        with override_settings(ENGRAM_EMBEDDING_URL="http://elsewhere.example/v1"):
            assert not run_checks(databases=["default"])
            assert "nothing to do" in reembed()
    found = dimensions(api.project)
    assert found["memory_memory"] == found["memory_entityvector"] == {768}
    assert dimensions(other.project)["memory_memory"] == {768}
    with hosted(fake_embeddings):
        assert other.top("harbour") == "I work at the harbour"
    assert found["memory_memory next"] == {None}
    assert "vector(768)" in hnsw_index()
    assert storage() == IN_ROW  # the new vectors' column kept its storage
    states = dict(EmbeddingSpace.objects.values_list("name", "state"))
    assert states == {
        "local:all-MiniLM-L6-v2": "retired", "openai-compatible:fake-768": "current"
    }  # fmt: skip
    with project_context(api.project), connection.cursor() as cursor:
        cursor.execute(
            "SELECT embedding = array_fill(0::real, ARRAY[768])::vector FROM memory_memory "
            "WHERE id = %s",
            [redacted],
        )
        assert cursor.fetchone() == (True,)  # a redacted memory stays zeros

    # A process started with the old settings refuses to start.
    [error] = run_checks(databases=["default"])
    assert error.id == "memory.E001" and "fake-768" in error.msg

    # And back to the local model (the settings of this process).
    assert "Switched: the deployment now embeds with local:all-MiniLM-L6-v2" in reembed()
    assert embeddings.active_space().dimensions == 384
    assert dimensions(api.project)["memory_memory"] == {384}
    assert "vector(384)" in hnsw_index()
    assert storage() == IN_ROW
    assert api.top("where do I live") == "I live in Lisbon"
    assert not run_checks(databases=["default"])


def test_a_deployment_switches_to_the_other_local_model_and_back(client: Any) -> None:
    """ENGRAM_LOCAL_MODEL=all-mpnet-base-v2 (768 dimensions) with the settings that name it; its
    files are where such a deployment's are (a folder of its name: `make model-mpnet`)."""
    api = Api(client)
    for text in MEMORIES:
        api.add(text)
    mpnet = Space("local", 768, model="all-mpnet-base-v2")
    folder = settings.ENGRAM_MODEL_DIR.parent / "all-mpnet-base-v2"
    with override_settings(
        ENGRAM_LOCAL_MODEL="all-mpnet-base-v2", ENGRAM_MODEL_DIR=folder, EMBEDDING_DIMENSIONS=768
    ):
        done = reembed()
        assert "Switched: the deployment now embeds with local:all-mpnet-base-v2" in done
        assert embeddings.active_space() == mpnet
        assert dimensions(api.project)["memory_memory"] == {768}
        assert "vector(768)" in hnsw_index()
        assert api.top("where do I live") == "I live in Lisbon"
        assert api.top("which instrument do I play") == "I play the cello every evening"
        # Scored by this model's fitted ranker if it has one, else by the bundled model's,
        # and the breakdown names which (scoring.ranker_for).
        found = api.search("which instrument do I play").json()[0]
        part, ranker = found["score_breakdown"], scoring.ranker_for(mpnet.name)
        own = scoring.ranker_file(mpnet.name).exists()
        assert part["ranker"] == ranker.name
        assert ranker.name.startswith(mpnet.name if own else scoring.DEFAULT_RANKER)
        assert part["semantic"] > 0.3 and part["bm25"] > 0
        calibrated = scoring.logistic(
            scoring.linear(
                ranker.calibrator,
                (part["relevance"], part["distinctiveness"], part["answer_gap"]),
            )
            + ranker.intercept
        )
        assert found["score"] == pytest.approx(calibrated, abs=1e-5)
        assert api.top("Rex", user_id="*") == "My dog is called Rex"  # the HNSW index path
        stored = stored_vector(api.project, "My dog is called Rex")
        expected = embeddings.build_embedder(mpnet).embed(["My dog is called Rex"])[0]
        assert stored == pytest.approx([float(x) for x in expected], abs=1e-6)
        assert not run_checks(databases=["default"])
    # A process with the default model's settings refuses to start on it.
    [error] = run_checks(databases=["default"])
    assert error.id == "memory.E001" and "local:all-mpnet-base-v2" in error.msg
    assert "Switched: the deployment now embeds with local:all-MiniLM-L6-v2" in reembed()
    assert dimensions(api.project)["memory_memory"] == {384}
    assert api.top("where do I live") == "I live in Lisbon"


def test_a_process_that_has_not_followed_yet_writes_nothing_and_searches_after_following(
    client: Any, fake_embeddings: FakeEmbeddings
) -> None:
    """Between a switch and its next check, a process still on the old model writes nothing
    (503 with Retry-After); a search that meets the new vectors follows at once and answers."""
    api = Api(client)
    api.add("I live in Lisbon")
    with hosted(fake_embeddings):
        reembed()
    old = embeddings.configured_space()  # this process's own settings: the local model
    stale = (old, embeddings.build_embedder(old))
    with override_settings(ENGRAM_EMBEDDING_CHECK_SECONDS=3600):
        embeddings._active, embeddings._checked = stale, float("inf")
        body = {"messages": "I like tea", "user_id": "alice", "infer": False}
        answer = client.post(
            "/v3/memories/add/", body, content_type="application/json",
            headers=auth(api.key.raw),
        )  # fmt: skip
        assert answer.status_code == 503, answer.content
        assert answer.headers["Retry-After"] == "3601"
        assert "being switched" in answer.json()["detail"]
        assert embeddings.active_space().name == "local:all-MiniLM-L6-v2"  # not yet followed
        assert api.top("Lisbon") == "I live in Lisbon"  # followed, and searched again
        assert embeddings.active_space().name == "openai-compatible:fake-768"
        # The operator dashboard's search too.
        embeddings._active, embeddings._checked = stale, float("inf")
        operator = get_user_model().objects.create_user("olive", password="pw")
        Membership.objects.create(
            user=operator, organization=api.key.key.project.organization, role="owner"
        )
        client.force_login(operator)
        page = client.get(
            f"/dashboard/p/{api.project}/memories/", {"q": "Lisbon", "user_id": "alice"}
        )
        assert page.status_code == 200 and b"I live in Lisbon" in page.content
        assert embeddings.active_space().name == "openai-compatible:fake-768"
    assert api.add("I like tea")
    assert dimensions(api.project)["memory_memory"] == {768}
    # What was written around the switch, embedded again on demand (a run cut short).
    with hosted(fake_embeddings):
        assert "vectors written around the last switch made again" in reembed("--settle")


def test_reembed_explains_itself(
    fake_embeddings: FakeEmbeddings, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "nothing to do" in reembed()
    with pytest.raises(CommandError, match="has not switched models"):
        reembed("--settle")
    with hosted(fake_embeddings):
        assert "Built" in reembed("--no-switch")
        # A transaction holds the table: the switch waits a moment, tries again, then stops,
        # switching nothing.
        monkeypatch.setattr(write, "LOCK_TIMEOUT", "100ms")
        monkeypatch.setattr(command, "SWITCH_ATTEMPTS", 2)
        db = connection.settings_dict
        with psycopg.connect(
            dbname=db["NAME"], user=db["USER"], password=db["PASSWORD"], host=db["HOST"],
            port=db["PORT"],
        ) as other:  # fmt: skip
            other.execute("SELECT count(*) FROM memory_memory")  # holds it till the end
            out = io.StringIO()
            with pytest.raises(CommandError, match="held the tables too long"):
                call_command("reembed", "--no-progress", stdout=out)
            assert "trying the switch again" in out.getvalue()
        assert EmbeddingSpace.objects.get(state="building").name == "openai-compatible:fake-768"
        # Writes that never stop coming: a few passes, then it stops, switching nothing.
        monkeypatch.setattr(write, "MAX_WHILE_HELD", -1)
        with pytest.raises(CommandError, match="kept being written faster"):
            reembed()
        assert EmbeddingSpace.objects.get(state="building").name == "openai-compatible:fake-768"
    # Another model's build under way: refused, until abandoned.
    with hosted(fake_embeddings, ENGRAM_EMBEDDING_MODEL="other", EMBEDDING_DIMENSIONS=512):
        with pytest.raises(Exception, match="A switch to openai-compatible:fake-768"):
            reembed()
        assert "Switch abandoned" in reembed("--abandon")
    assert not EmbeddingSpace.objects.filter(state="building").exists()
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_indexes WHERE indexname = 'memory_embedding_next_hnsw'")
        assert cursor.fetchone() is None
    assert "No switch was under way" in reembed("--abandon")


def test_the_hosted_embedder_sends_dimensions_only_when_asked(
    fake_embeddings: FakeEmbeddings,
) -> None:
    OpenAICompatibleEmbedder(fake_embeddings.url, "m", None, 768).embed(["tea"])
    OpenAICompatibleEmbedder(fake_embeddings.url, "m", None, 768, send_dimensions=False).embed(
        ["tea"]
    )
    assert [r.get("dimensions") for r in fake_embeddings.requests] == [768, None]


def test_a_worker_retries_a_job_that_met_the_other_models_vectors() -> None:
    """A worker that has not yet followed a switch fails its attempt on the vectors' dimension:
    retried (the next attempt embeds with the new model), unlike other refused values."""
    assert not permanent(DataError("expected 768 dimensions, not 384"))
    assert not permanent(DataError("different vector dimensions 768 and 384"))
    assert permanent(DataError("value too long for type character varying(64)"))
