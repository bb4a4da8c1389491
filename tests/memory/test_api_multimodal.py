"""Multimodal content parts on add (issue #12): image_url, pdf_url, txt_url, mdx_url.

The API refuses them with infer=false and refuses anything hostile; a text document's URL is
fetched by the worker only from an allow-listed host (here a local HTTP server started by the
test); images and PDFs reach Claude (faked at the HTTP boundary) as blocks; the offline
extractor skips them with a note.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
from django.test import override_settings

from memory.extraction import pipeline
from memory.extraction.llm.claude import ClaudeExtractor
from memory.extraction.llm.offline import OfflineExtractor
from memory.models import Memory, MemoryEvent
from tenants.db import project_context
from tests.base import BaseTestCase
from tests.config.test_env import KEY, start_django
from tests.fake_anthropic import FakeClaude, Reply
from tests.local_server import serving
from tests.memory.test_events import wait_for
from tests.webhooks.receiver import receiving

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(17)
PNG_URI = "data:image/png;base64," + base64.b64encode(PNG).decode()
DOCUMENT = "# Notes\n\nI moved to Lisbon last spring. I work as a nurse at Santa Maria.\n"


def b64(text: str | bytes) -> str:
    raw = text.encode() if isinstance(text, str) else text
    return base64.b64encode(raw).decode()


def part(kind: str, url: str) -> dict[str, Any]:
    return {"type": kind, kind: {"url": url}}


@dataclass
class Route:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=lambda: {"Content-Type": "text/plain"})


@dataclass
class DocServer:
    """A local HTTP server answering scripted routes (the documents a test fetches)."""

    host: str = ""
    routes: dict[str, Route] = field(default_factory=dict)
    hits: list[str] = field(default_factory=list)

    def url(self, path: str) -> str:
        return f"http://{self.host}{path}"


@pytest.fixture
def doc_server() -> Iterator[DocServer]:
    docs = DocServer()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            docs.hits.append(self.path)
            route = docs.routes.get(self.path, Route(404, b"not found"))
            self.send_response(route.status)
            for name, value in route.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(route.body)))
            self.end_headers()
            self.wfile.write(route.body)

        def log_message(self, *args: Any) -> None:
            pass

    with serving(Handler) as port:
        docs.host = f"127.0.0.1:{port}"
        yield docs


class MultimodalTestCase(BaseTestCase):
    @pytest.fixture(autouse=True)
    def _servers(self, fake_claude: FakeClaude, doc_server: DocServer) -> Iterator[None]:
        self.fake, self.docs = fake_claude, doc_server
        self.claude = ClaudeExtractor(
            api_key="sk-test", base_url=fake_claude.url, model="claude-haiku-5-5",
            max_tokens=512, timeout=5, max_retries=0,
        )  # fmt: skip
        with override_settings(ENGRAM_FETCH_ALLOWED_HOSTS=[doc_server.host]):
            yield

    def add(self, *contents: Any, infer: bool = True, **extra: Any) -> Any:
        messages = [{"role": "user", "content": c} for c in contents]
        body = {"messages": messages, "user_id": "alice", "infer": infer, **extra}
        return self.call("post", "/v3/memories/add/", body)

    def queued(self, *contents: Any) -> MemoryEvent:
        response = self.add(*contents)
        assert response.status_code == 200, response.json()
        return self.event(response.json()["event_id"])

    def event(self, event_id: Any) -> MemoryEvent:
        with project_context(self.alice.key.project_id):
            return MemoryEvent.objects.get(pk=event_id)

    def events(self) -> int:
        with project_context(self.alice.key.project_id):
            return MemoryEvent.objects.count()

    def memories(self) -> list[str]:
        with project_context(self.alice.key.project_id):
            return list(Memory.objects.order_by("created_at").values_list("text", flat=True))

    def attempt(self, event: MemoryEvent, extractor: Any = None) -> tuple[int | None, MemoryEvent]:
        """One worker attempt (failures recorded as a worker records them)."""
        delay = pipeline.attempt(event.id, self.alice.key.project_id, extractor or self.claude)
        return delay, self.event(event.id)

    def prompt(self, index: int = 0) -> Any:
        return self.fake.requests[index]["body"]["messages"][0]["content"]

    # --- the request ------------------------------------------------------------------------

    def test_infer_false_refuses_every_part_type_naming_the_message(self) -> None:
        for content in (
            part("image_url", "https://example.com/cat.jpg"),
            part("image_url", PNG_URI),
            part("pdf_url", "https://example.com/report.pdf"),
            part("txt_url", b64("I like tea")),
            part("mdx_url", self.docs.url("/notes.mdx")),
        ):
            response = self.add("I like tea", content, infer=False)
            assert response.status_code == 400, content
            detail = response.json()["detail"]
            assert detail.startswith("messages.1.content: "), detail
            assert "content needs infer=true" in detail
        assert (self.memories(), self.events()) == ([], 0)

    def test_infer_true_queues_the_parts_as_sent(self) -> None:
        contents = [
            "Here is what I sent you",
            part("image_url", "https://example.com/cat.jpg"),
            part("image_url", PNG_URI),
            part("pdf_url", "https://example.com/report.pdf"),
            part("txt_url", b64("I like tea")),
            part("mdx_url", self.docs.url("/notes.mdx")),
        ]
        event = self.queued(*contents)
        assert event.status == "PENDING"
        assert [m["content"] for m in event.payload["messages"]] == contents
        assert self.docs.hits == []  # nothing fetched on the request path

    def test_a_document_url_is_refused_unless_its_host_is_allowed(self) -> None:
        cases = {
            (): self.docs.url("/notes.txt"),  # the default: no host at all
            ("127.0.0.1",): self.docs.url("/notes.txt"),  # another port
            (self.docs.host,): "http://localhost:" + self.docs.host.split(":")[1] + "/notes.txt",
            ("example.com",): "https://example.com.evil.net/notes.txt",
            ("example.com:8080",): "http://example.com/notes.txt",
        }
        for allowed, url in cases.items():
            with override_settings(ENGRAM_FETCH_ALLOWED_HOSTS=list(allowed)):
                response = self.add(part("txt_url", url))
            assert response.status_code == 400, (allowed, url)
            detail = response.json()["detail"]
            assert detail.startswith("messages.0.content: txt_url.url: "), detail
            assert "is not an allowed host for fetching documents" in detail
        with override_settings(ENGRAM_FETCH_ALLOWED_HOSTS=["example.com"]):
            assert self.add(part("mdx_url", "https://EXAMPLE.com./a.mdx")).status_code == 200
        assert (self.memories(), self.events(), self.docs.hits) == ([], 1, [])

    def test_hostile_parts_are_refused_and_change_nothing(self) -> None:
        port = self.docs.host.split(":")[1]
        hostile: list[Any] = [
            part("txt_url", "javascript:alert(1)"),
            part("txt_url", "file:///etc/passwd"),
            part("txt_url", "gopher://127.0.0.1:" + port + "/_x"),
            part("image_url", "ftp://example.com/a.png"),
            part("pdf_url", "data:application/pdf;base64," + b64("%PDF-1.4")),
            part("image_url", "data:image/svg+xml;base64," + b64("<svg/>")),
            part("image_url", "data:image/jpeg;base64," + b64(PNG)),  # not a JPEG
            part("image_url", "data:image/png;base64,!!!"),
            part("txt_url", f"http://{self.docs.host}@evil.example/x.txt"),
            part("txt_url", f"http://evil.example\\@{self.docs.host}/x.txt"),
            part("txt_url", f"http://user:pw@{self.docs.host}/x.txt"),
            part("txt_url", "http://10.0.0.1/x.txt"),
            part("txt_url", "http://[::1]:" + port + "/x.txt"),
            part("txt_url", "http://2130706433:" + port + "/x.txt"),
            part("txt_url", f"http://{self.docs.host}/a b.txt"),
            part("txt_url", "http:///x.txt"),
            part("txt_url", "http://127.0.0.1:99999/x.txt"),
            part("image_url", "https://example.com/" + "a" * 2100),
            part("txt_url", b64("nul \x00 inside")),
            part("txt_url", b64(b"\xff\xfe not utf-8")),
            part("txt_url", b64("   \n")),
            part("txt_url", "not base64 at all!"),
            part("txt_url", b64("x" * 600_000)),  # over ENGRAM_MAX_DOCUMENT_BYTES
            part("image_url", "data:image/png;base64," + b64(PNG + bytes(600_000))),
            {"type": "video_url", "video_url": {"url": "https://example.com/a.mp4"}},
            {"type": "image_url", "url": "https://example.com/a.png"},
            {"type": "image_url", "image_url": "https://example.com/a.png"},
            {"type": "image_url", "image_url": {"url": 42}},
            {"type": "image_url", "image_url": {"url": ""}},
            {"type": "image_url", "image_url": {"url": "https://e.com/a", "size": "big"}},
            {"type": "image_url", "image_url": {"url": "https://e.com/a"}, "extra": 1},
            {"image_url": {"url": "https://example.com/a.png"}},
            [part("image_url", "https://example.com/a.png")],
        ]
        for content in hostile:
            response = self.add(content)
            assert response.status_code == 400, content
            assert response.json()["detail"].startswith("messages.0.content: "), content
        too_many = [part("image_url", f"https://example.com/{n}.png") for n in range(21)]
        response = self.add(*too_many)
        assert response.status_code == 400
        assert "21 content parts" in response.json()["detail"]
        together = self.add(
            part("txt_url", b64("y" * 300_000)), part("mdx_url", b64("z" * 300_000))
        )
        assert together.status_code == 400
        assert "600000 bytes together; the limit is 524288" in together.json()["detail"]
        nul = self.add(part("image_url", "https://example.com/\x00.png"))
        assert nul.status_code == 400
        assert (self.memories(), self.events(), self.docs.hits) == ([], 0, [])

    def test_a_bad_allow_list_stops_the_server_at_start_up(self) -> None:
        for entry in ("https://example.com", "*.example.com", "example.com/docs", "h:70000"):
            result = start_django(
                DATABASE_URL="postgresql://u:p@127.0.0.1:1/x",
                ENGRAM_SECRET_KEY=KEY,
                ENGRAM_FETCH_ALLOWED_HOSTS=f"docs.example.org,{entry}",
            )
            assert result.returncode != 0, entry
            assert "ENGRAM_FETCH_ALLOWED_HOSTS" in result.stderr, entry

    # --- text documents in the worker -------------------------------------------------------

    def test_a_fetched_document_becomes_the_messages_text(self) -> None:
        self.docs.routes["/notes.mdx"] = Route(
            body=DOCUMENT.encode(), headers={"Content-Type": "text/markdown; charset=utf-8"}
        )
        event = self.queued("Read my notes", part("mdx_url", self.docs.url("/notes.mdx")))
        fact = "User lives in Lisbon"
        self.fake.script(
            Reply({"facts": [{"text": fact, "confidence": 0.9, "positions": [1]}]}),
            Reply({"decisions": [{"fact": 0, "event": "ADD", "text": fact}]}),
        )
        delay, done = self.attempt(event)
        assert (delay, done.status, done.error) == (None, "SUCCEEDED", "")
        assert self.docs.hits == ["/notes.mdx"]
        assert f"[1] user: {DOCUMENT}" in self.prompt()
        assert self.memories() == [fact]
        with project_context(self.alice.key.project_id):
            assert Memory.objects.get().source_positions == [1]
        # The payload keeps the part, not the text; later events see its placeholder.
        assert done.payload["messages"][1]["content"] == part(
            "mdx_url", self.docs.url("/notes.mdx")
        )
        self.fake.script(Reply({"facts": []}))
        self.attempt(self.queued("Anything else?"))
        recent = self.prompt(-1)
        assert f"[-1] user: [mdx document: {self.docs.url('/notes.mdx')}]" in recent
        assert "Lisbon" not in recent

    def test_a_base64_document_is_decoded_for_extraction(self) -> None:
        event = self.queued(part("txt_url", b64(DOCUMENT)))
        self.fake.script(Reply({"facts": []}))
        _, done = self.attempt(event)
        assert done.status == "SUCCEEDED"
        assert f"[0] user: {DOCUMENT}" in self.prompt()
        assert self.docs.hits == []

    def test_offline_the_document_is_read_like_any_message(self) -> None:
        text = "I moved to Lisbon last spring. I work as a nurse at Santa Maria."
        self.docs.routes["/notes.txt"] = Route(body=text.encode())
        event = self.queued(part("txt_url", self.docs.url("/notes.txt")))
        _, done = self.attempt(event, OfflineExtractor())
        assert (done.status, done.error) == ("SUCCEEDED", "")
        assert self.memories() == ["I moved to Lisbon last spring.", "I work as a nurse at "
                                   "Santa Maria."]  # fmt: skip

    def test_a_document_that_cannot_be_read_fails_the_event_at_once(self) -> None:
        self.docs.routes.update({
            "/moved.txt": Route(302, headers={"Location": self.docs.url("/notes.txt")}),
            "/big.txt": Route(body=b"x" * 4096),
            "/image.png": Route(body=PNG, headers={"Content-Type": "image/png"}),
            "/untyped.txt": Route(body=b"I like tea", headers={}),
            "/latin1.txt": Route(body="café".encode("latin-1"),
                                 headers={"Content-Type": "text/plain; charset=iso-8859-1"}),
            "/bad-utf8.txt": Route(body=b"caf\xe9 au lait"),
            "/nul.txt": Route(body=b"I like\x00 tea"),
            "/empty.txt": Route(body=b" \n"),
        })  # fmt: skip
        expected = {
            "/missing.txt": "the server answered 404 Not Found",
            "/moved.txt": "302, a redirect (not followed)",
            "/big.txt": "the document is 4096 bytes, over ENGRAM_MAX_DOCUMENT_BYTES (2048)",
            "/image.png": "the content type is image/png, not text/*",
            "/untyped.txt": "the content type is missing",
            "/latin1.txt": "the charset is iso-8859-1",
            "/bad-utf8.txt": "txt_url is not UTF-8 text",
            "/nul.txt": "contains a NUL character",
            "/empty.txt": "txt_url is empty",
        }
        for path, reason in expected.items():
            event = self.queued("My notes:", part("txt_url", self.docs.url(path)))
            with override_settings(ENGRAM_MAX_DOCUMENT_BYTES=2048):
                delay, done = self.attempt(event)
            assert (delay, done.status, done.attempts) == (None, "FAILED", 1), path
            assert "message 1 (txt_url): " in done.error, path
            assert reason in done.error, (path, done.error)
        assert self.docs.hits.count("/notes.txt") == 0  # the redirect was not followed
        assert (self.fake.requests, self.memories()) == ([], [])

    def test_the_documents_of_one_request_share_the_size_limit(self) -> None:
        self.docs.routes["/a.txt"] = Route(body=b"I like tea. " * 100)
        self.docs.routes["/b.txt"] = Route(body=b"I like jam. " * 100)
        event = self.queued(
            part("txt_url", self.docs.url("/a.txt")), part("txt_url", self.docs.url("/b.txt"))
        )
        with override_settings(ENGRAM_MAX_DOCUMENT_BYTES=2048):
            _, done = self.attempt(event)
        assert done.status == "FAILED"
        assert "message 1 (txt_url)" in done.error
        assert "1200 bytes, over the 848 bytes the request's earlier documents left of 2048" in (
            done.error
        )

    def test_a_host_no_longer_allowed_is_not_fetched(self) -> None:
        event = self.queued(part("txt_url", self.docs.url("/notes.txt")))
        with override_settings(ENGRAM_FETCH_ALLOWED_HOSTS=[]):
            delay, done = self.attempt(event)
        assert (delay, done.status) == (None, "FAILED")
        assert "the host is not in ENGRAM_FETCH_ALLOWED_HOSTS" in done.error
        assert self.docs.hits == []

    @override_settings(ENGRAM_EVENT_MAX_ATTEMPTS=2)
    def test_an_unavailable_document_is_retried_then_fails(self) -> None:
        self.docs.routes["/busy.txt"] = Route(503, b"try later")
        event = self.queued(part("txt_url", self.docs.url("/busy.txt")))
        delay, first = self.attempt(event)
        assert (first.status, first.attempts) == ("PENDING", 1)
        assert delay is not None
        assert "DocumentUnavailableError" in first.error
        assert "the server answered 503" in first.error
        delay, last = self.attempt(event)
        assert (delay, last.status, last.attempts) == (None, "FAILED", 2)
        assert self.docs.hits == ["/busy.txt", "/busy.txt"]

    def test_a_server_that_drips_its_answer_is_cut_off_at_the_timeout(self) -> None:
        # One byte every 0.3 s: no read waits a second; the whole answer would take 15 s.
        with (
            receiving("drip", delay=0.3) as slow,
            override_settings(ENGRAM_FETCH_ALLOWED_HOSTS=[slow.host], ENGRAM_FETCH_TIMEOUT=1),
        ):
            event = self.queued(part("txt_url", f"http://{slow.host}/notes.txt"))
            delay, done = self.attempt(event)
            assert wait_for(lambda: bool(slow.dripped), seconds=10)
        assert (done.status, done.attempts, delay is not None) == ("PENDING", 1, True)
        assert "DocumentUnavailableError" in done.error
        assert "deadline of 1 s" in done.error
        assert slow.dripped[0] < 20  # the worker hung up long before the answer's end

    # --- images and PDFs --------------------------------------------------------------------

    def test_images_and_pdfs_reach_claude_as_blocks(self) -> None:
        event = self.queued(
            "Here is my new cat, and my lab results",
            part("image_url", "https://example.com/cat.jpg"),
            part("image_url", PNG_URI),
            part("pdf_url", "https://example.com/labs.pdf"),
        )
        fact = "User has a grey cat"
        self.fake.script(
            Reply({"facts": [{"text": fact, "confidence": 0.9, "positions": [1]}]}),
            Reply({"decisions": [{"fact": 0, "event": "ADD", "text": fact}]}),
        )
        _, done = self.attempt(event)
        assert (done.status, done.error) == ("SUCCEEDED", "")
        blocks = self.prompt()
        assert blocks[0]["type"] == "text"
        assert "[1] user: [image: https://example.com/cat.jpg]" in blocks[0]["text"]
        assert f"[2] user: [image: image/png, {len(PNG)} bytes]" in blocks[0]["text"]
        assert blocks[1:] == [
            {"type": "text", "text": "The image of message [1]:"},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
            {"type": "text", "text": "The image of message [2]:"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": b64(PNG)}},
            {"type": "text", "text": "The PDF of message [3]:"},
            {"type": "document", "source": {"type": "url", "url": "https://example.com/labs.pdf"}},
        ]  # fmt: skip
        # Only the extraction call carries them; the decision sees the fact as text.
        assert isinstance(self.prompt(1), str)
        assert self.memories() == [fact]
        # The running summary reads the placeholders, never the image data.
        self.fake.script(Reply({"summary": "Alice has a grey cat."}))
        with self.settings(ENGRAM_SUMMARY_EVERY=1):
            pipeline.refresh_summary(event.id, self.alice.key.project_id, self.claude)
        summary_prompt = self.prompt(-1)
        assert "[2] user: [image: image/png" in summary_prompt
        assert b64(PNG) not in summary_prompt

    def test_the_offline_extractor_skips_images_with_a_note(self) -> None:
        event = self.queued(
            "I adopted a grey cat named Miso.",
            part("image_url", "https://example.com/cat.jpg"),
            part("pdf_url", "https://example.com/labs.pdf"),
        )
        _, done = self.attempt(event, OfflineExtractor())
        assert done.status == "SUCCEEDED"
        assert self.memories() == ["I adopted a grey cat named Miso."]
        assert done.error == (
            "message 1: image_url skipped, the offline extractor does not read images (see the "
            "extraction settings); message 2: pdf_url skipped, the offline extractor does not "
            "read PDFs (see the extraction settings)"
        )
        assert self.fake.requests == []

    def test_an_agents_image_is_not_stored_as_a_fact_offline(self) -> None:
        body = {"messages": [{"role": "assistant", "content": part("image_url", PNG_URI)}],
                "agent_id": "bot", "infer": True}  # fmt: skip
        response = self.call("post", "/v3/memories/add/", body)
        _, done = self.attempt(self.event(response.json()["event_id"]), OfflineExtractor())
        assert (done.status, self.memories()) == ("SUCCEEDED", [])
        assert "image_url skipped" in done.error
