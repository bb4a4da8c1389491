"""The health probes' paths (memory.health answers them; gunicorn's access log skips them)."""

from __future__ import annotations

LIVE_PATH = "/livez"
READY_PATH = "/readyz"
PROBE_PATHS = (LIVE_PATH, READY_PATH)
