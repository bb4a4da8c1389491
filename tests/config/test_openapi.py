from __future__ import annotations

from io import StringIO

from django.core.management import call_command
from django.test import TestCase


class OpenApiTestCase(TestCase):
    def test_it_generates_a_valid_schema_without_warnings(self) -> None:
        call_command("spectacular", "--validate", "--fail-on-warn", stdout=StringIO())

    def test_it_serves_the_schema_with_the_ping_path(self) -> None:
        response = self.client.get("/api/schema/", HTTP_ACCEPT="application/json")
        assert response.status_code == 200
        schema = response.json()
        assert "/v1/ping/" in schema["paths"]
        assert "ApiKeyAuth" in schema["components"]["securitySchemes"]

    def test_it_documents_a_json_body_for_every_response(self) -> None:
        # A free-form object (OpenApiTypes.OBJECT) or no body lets the schema promise nothing;
        # tests/memory/test_api_schema.py checks the documented bodies against real responses.
        schema = self.client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
        for path, item in schema["paths"].items():
            for method, operation in item.items():
                assert {"401", "429"} <= set(operation["responses"]), (method, path)
                for status, response in operation["responses"].items():
                    body = response["content"]["application/json"]["schema"]
                    assert body.get("$ref") or body.get("items") or body.get("oneOf"), (
                        method,
                        path,
                        status,
                    )

    def test_it_serves_the_docs_page_with_local_assets_only(self) -> None:
        response = self.client.get("/api/docs/")
        assert response.status_code == 200
        html = response.content.decode()
        assert "/static/drf_spectacular_sidecar/swagger-ui-dist/" in html
        assert "https://" not in html and "http://" not in html

    def test_it_serves_the_docs_assets(self) -> None:
        asset = "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js"
        response = self.client.get(asset)
        assert response.status_code == 200
