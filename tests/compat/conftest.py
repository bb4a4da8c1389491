"""The compatibility suite runs under `make compat` (ENGRAM_COMPAT=1), which installs the
frameworks first; `make test` does not collect it. `.ci/run` runs both."""

from __future__ import annotations

import os

collect_ignore = [] if os.environ.get("ENGRAM_COMPAT") == "1" else ["test_frameworks.py"]
