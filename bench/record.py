"""engram's web app, recording every search's candidates and signals for bench/replay.py.

A search ranks its candidates by scoring alone (memory.retrieval.search.score_candidates): with
each candidate's signals and the query's analysis recorded once, a change to the scoring's
constants can be measured on every benchmark set in seconds, without storing or searching again.
Serve it in place of the usual server (one process and one thread: the records are written as
the searches run), run the benchmarks against it, then replay the file:

    set -a; . .local/engram.env; set +a
    ENGRAM_RECORD_FILE=/tmp/searches.jsonl ENGRAM_API_RATE=off .venv/bin/gunicorn \\
        --pythonpath bench -w 1 --threads 1 -b 127.0.0.1:8010 record:application
    .venv/bin/python bench/assistant.py --host http://127.0.0.1:8010      # and locomo.py,
    .venv/bin/python bench/replay.py /tmp/searches.jsonl --set ANSWER_MARGIN=0.25

Each line of the file is one search: {"query": {text, names, keywords, typical, model},
"candidates": [{"memory": {id, user_id, metadata, text}, "signals": {semantic, keyword, group,
entities, in_window, words}}, ...]}, the candidates in the order scoring saw them. Memory texts
are cut to their first 300 characters.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from config.wsgi import application
from memory.retrieval import search
from memory.retrieval.scoring import Score, Signals
from memory.text.query import Query
from tenants.replica import fetch_all as _fetch_all

__all__ = ["application"]

TEXT_KEPT = 300
ID, USER, TEXT, METADATA = (
    search.FIELD_NAMES.index(n) for n in ("id", "user_id", "text", "metadata")
)

if not os.environ.get("ENGRAM_RECORD_FILE"):
    raise SystemExit("bench/record.py: set ENGRAM_RECORD_FILE to the file the searches go to")
_out = Path(os.environ["ENGRAM_RECORD_FILE"]).open("a", buffering=1)  # noqa: SIM115 (the process's)
_rows = threading.local()
_score_candidates = search.score_candidates


def fetch_all(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    rows = _fetch_all(sql, params)
    _rows.last = rows
    return rows


def score_candidates(candidates: Sequence[Signals], query: Query) -> list[Score]:
    rows = getattr(_rows, "last", [])
    metadata = [
        r[METADATA] if not isinstance(r[METADATA], str) else json.loads(r[METADATA]) for r in rows
    ]
    record = {
        "query": {
            "text": query.text,
            "names": list(query.names),
            "keywords": query.keywords,
            "language": query.language,
            "typical": query.typical,
            "model": query.model,
        },
        "candidates": [
            {
                "memory": {
                    "id": str(row[ID]),
                    "user_id": row[USER],
                    "metadata": meta,
                    "text": row[TEXT][:TEXT_KEPT],
                },
                "signals": {
                    "semantic": c.semantic,
                    "keyword": c.keyword,
                    "group": None if c.group is None else str(c.group),
                    "entities": list(c.entities),
                    "in_window": c.in_window,
                    "words": c.words,
                },
            }
            for row, meta, c in zip(rows, metadata, candidates, strict=True)
        ],
    }
    _out.write(json.dumps(record) + "\n")
    return _score_candidates(candidates, query)


# search's own name for the replica's fetch_all, which it imports.
search.fetch_all = fetch_all  # type: ignore[attr-defined]
search.score_candidates = score_candidates
