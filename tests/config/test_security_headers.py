"""Security headers: a strict Content-Security-Policy everywhere, HSTS behind a TLS proxy."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import subprocess
import sys

from django.conf import settings
from django.test import TestCase

from tests.factory import auth


class ContentSecurityPolicyTestCase(TestCase):
    def test_it_sends_the_policy_with_pages_and_api_responses(self) -> None:
        for path in ("/api/docs/", "/admin/login/", "/v1/ping/"):
            response = self.client.get(path, headers=auth("eng_nothing"))
            policy = response["Content-Security-Policy"]
            assert policy == settings.ENGRAM_CONTENT_SECURITY_POLICY, path
        assert "'unsafe-inline'" not in settings.ENGRAM_CONTENT_SECURITY_POLICY

    def test_it_serves_the_docs_page_without_inline_scripts(self) -> None:
        html = self.client.get("/api/docs/").content.decode()
        scripts = re.findall(r"<script([^>]*)>", html)
        assert scripts
        assert all("src=" in attributes for attributes in scripts), scripts
        script = self.client.get("/api/docs/", {"script": ""})
        assert script.status_code == 200
        assert "SwaggerUIBundle" in script.content.decode()

    def test_it_allows_exactly_the_docs_pages_inline_style(self) -> None:
        # drf-spectacular's page carries one small <style> block; a new version that changes it
        # fails here instead of quietly losing its styles in browsers.
        html = self.client.get("/api/docs/").content.decode()
        for block in re.findall(r"<style>(.*?)</style>", html, re.DOTALL):
            digest = base64.b64encode(hashlib.sha256(block.encode()).digest()).decode()
            assert f"'sha256-{digest}'" in settings.ENGRAM_CONTENT_SECURITY_POLICY


def security_settings(**env: str) -> str:
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(getattr(s, 'SECURE_HSTS_SECONDS', 0), s.SESSION_COOKIE_SECURE)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout.strip()


def test_it_sends_hsts_only_behind_a_tls_proxy() -> None:
    assert security_settings(ENGRAM_BEHIND_TLS_PROXY="false") == "0 False"
    assert security_settings(ENGRAM_BEHIND_TLS_PROXY="true") == "31536000 True"
    assert security_settings(ENGRAM_BEHIND_TLS_PROXY="true", ENGRAM_HSTS_SECONDS="300") == (
        "300 True"
    )
