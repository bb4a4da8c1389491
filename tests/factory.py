"""Small builders for test rows: each creates exactly what a test asks for."""

from __future__ import annotations

from typing import Any

from tenants.actions import NewApiKey, do_create_api_key


def make_key(org: str = "acme", project: str = "main", **kwargs: Any) -> NewApiKey:
    return do_create_api_key(org_name=org, project_name=project, **kwargs)


def auth(raw_key: str, scheme: str = "Token") -> dict[str, str]:
    """Headers for the Django test client's `headers=` argument."""
    return {"Authorization": f"{scheme} {raw_key}"}
