"""The headers that fix a connection's scope ids (no Django here: the stdio script sends them)."""

from __future__ import annotations

SCOPE_HEADERS = {
    "user_id": "X-Engram-User-Id",
    "agent_id": "X-Engram-Agent-Id",
    "app_id": "X-Engram-App-Id",
    "run_id": "X-Engram-Run-Id",
}
