"""The API's error contract, checked on a small echo endpoint mounted only for these tests."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
from django.db import connection, transaction
from django.test import override_settings
from django.urls import path
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from tests.base import BaseTestCase
from tests.factory import auth


class EchoSerializer(serializers.Serializer[dict[str, object]]):
    text = serializers.CharField()
    count = serializers.IntegerField(min_value=1)


@api_view(["POST"])
def echo(request: Request) -> Response:
    serializer = EchoSerializer(data=request.data)
    serializer.is_valid(raise_exception=True)
    return Response(serializer.validated_data)


# Two advisory locks taken in opposite orders by this request and another session.
HOLD_FIRST = threading.Event()


@api_view(["POST"])
def deadlock(request: Request) -> Response:
    """Takes lock 1, lets the other session take lock 2, then waits for lock 2: a deadlock."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(7001)")
        HOLD_FIRST.set()
        time.sleep(0.2)  # the other session takes 7002 meanwhile
        cursor.execute("SELECT pg_advisory_xact_lock(7002)")
    return Response({"detail": "no deadlock"})


urlpatterns = [path("v1/echo/", echo), path("v1/deadlock/", deadlock)]


@override_settings(ROOT_URLCONF=__name__, ENGRAM_MAX_BODY_BYTES=2048)
class ApiErrorsTestCase(BaseTestCase):
    def post(self, body: str | bytes) -> dict[str, object]:
        response = self.client.post(
            "/v1/echo/", body, content_type="application/json", headers=auth(self.alice.raw)
        )
        return {"status": response.status_code, **response.json()}

    def test_it_accepts_a_valid_body(self) -> None:
        assert self.post('{"text": "hi", "count": 2}') == {"status": 200, "text": "hi", "count": 2}

    def test_it_explains_invalid_json(self) -> None:
        result = self.post('{"text": ')
        assert result["status"] == 400
        assert "JSON parse error" in str(result["detail"])

    def test_it_names_the_field_in_a_validation_error(self) -> None:
        result = self.post('{"text": "hi", "count": 0}')
        assert result["status"] == 400
        assert str(result["detail"]).startswith("count: ")
        assert result["errors"] == {"count": ["Ensure this value is greater than or equal to 1."]}

    def test_it_refuses_an_oversized_body_with_413(self) -> None:
        result = self.post('{"text": "' + "x" * 4096 + '", "count": 1}')
        assert result["status"] == 413
        assert "limit of 2048 bytes" in str(result["detail"])

    def test_it_asks_for_a_length_when_a_chunked_body_cannot_be_read(self) -> None:
        # Under gunicorn a chunked body is read (tests/config/test_gunicorn.py); a server that
        # cannot say where it ends gets 411, never a body silently taken as empty.
        response = self.client.generic(
            "POST", "/v1/echo/", headers={**auth(self.alice.raw), "Transfer-Encoding": "chunked"}
        )
        assert response.status_code == 411
        assert "Content-Length" in response.json()["detail"]

    def test_it_refuses_a_non_json_content_type(self) -> None:
        response = self.client.post(
            "/v1/echo/", "text=hi", content_type="text/plain", headers=auth(self.alice.raw)
        )
        assert response.status_code == 415
        assert "detail" in response.json()


class NotFoundTestCase(BaseTestCase):
    def test_it_answers_unknown_paths_with_json(self) -> None:
        response = self.client.get("/v1/nothing-here/", headers=auth(self.alice.raw))
        assert response.status_code == 404
        assert response.json() == {"detail": "Not found."}


@override_settings(ROOT_URLCONF=__name__)
def test_a_deadlock_is_a_503_asking_for_a_retry(committed_db: None, client: Any) -> None:
    """PostgreSQL aborts the request's transaction (the first to wait detects the cycle): the
    client gets a 503 with Retry-After, not a 500, and nothing of the request is committed."""
    from tests.factory import make_key

    key = make_key("acme", "deadlock")
    settings_dict = connection.settings_dict
    dsn = {"dbname": settings_dict["NAME"], "user": settings_dict["USER"],
           "password": settings_dict["PASSWORD"], "host": settings_dict["HOST"],
           "port": settings_dict["PORT"]}  # fmt: skip

    def other_session() -> None:
        with psycopg.connect(**dsn) as other, other.cursor() as cursor:
            HOLD_FIRST.wait(10)
            cursor.execute("SELECT pg_advisory_xact_lock(7002)")
            time.sleep(0.4)  # the request is waiting for 7002 by now
            cursor.execute("SELECT pg_advisory_xact_lock(7001)")  # granted once it is aborted
            other.rollback()

    HOLD_FIRST.clear()
    thread = threading.Thread(target=other_session)
    thread.start()
    response = client.post("/v1/deadlock/", {}, content_type="application/json",
                           headers=auth(key.raw))  # fmt: skip
    thread.join(30)
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "1"
    assert "nothing was changed" in response.json()["detail"]
