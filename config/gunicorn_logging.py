"""gunicorn's logger (`logger_class` in config/gunicorn_conf.py): gunicorn's own, with every line
of its access and error logs redacted (config.redaction) as it is written.

gunicorn writes the access line from the WSGI environ after the response, so the path is logged
however the request was answered; its error log quotes the request lines it refuses. Wrapping
the handlers' formatters covers both, and whatever handlers a later set-up adds (a config
reload runs setup again).
"""

from __future__ import annotations

import logging
from typing import Any

from gunicorn.glogging import Logger  # type: ignore[import-untyped]

from config.probes import PROBE_PATHS
from config.redaction import RedactingFormatter


class RedactingLogger(Logger):  # type: ignore[misc]
    def access(self, resp: Any, req: Any, environ: dict[str, Any], request_time: Any) -> None:
        """Every request's line, but the health probes' (an orchestrator asks every few
        seconds: memory.health logs their changes instead)."""
        if environ.get("PATH_INFO") in PROBE_PATHS:
            return
        super().access(resp, req, environ, request_time)

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        for log in (self.error_log, self.access_log):
            for handler in log.handlers:
                formatter = handler.formatter or logging.Formatter()
                if not isinstance(formatter, RedactingFormatter):
                    handler.setFormatter(RedactingFormatter(formatter))
