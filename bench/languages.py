"""Retrieval quality per language: bench/assistant.py's questions over the personas of
bench/data/languages/ (one persona per file, in German, Spanish, French, Russian, Arabic, Hindi,
Chinese, Japanese and Korean; how they were written: bench/data/README.md), through the public
API at its defaults.

Each file's persona is one scope, its facts added raw (infer=false, one add per fact, a day
apart), then each question searched at threshold 0 and at the API's default threshold (top_k
10). It prints one row per file, then per language and overall:

  - returned: an answer is among the results at the default threshold;
  - first: an answer is the first result at the default threshold (first@0: at threshold 0);
  - MRR@0: mean reciprocal rank of the first answer at threshold 0 (10 results);
  - off empty: off-topic questions for which the default threshold returns nothing (median
    number of results there);
  - best on / best off: the median best score (threshold 0) of answerable and off-topic
    questions, which shows whether the scores still separate them in that language.

`--split fit` runs the files the ranker may be fitted on (<lang>.json), `--split heldout` the
held-out ones (<lang>-heldout.json: in no fit, run only to judge), `--split all` (default) both.
`--also-host URL` asks the same questions of the same stored facts through another server on
the same database (e.g. one on the previous commit) and prints its table too.

    make run   # in another terminal
    .venv/bin/python bench/languages.py [--split fit|heldout|all] [--only de,zh]
        [--host URL --api-key KEY] [--also-host URL]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

from assistant import Asked, Persona, Run, evaluate, key_words, store_raw
from common import ROOT, Api, RunSummary, default_host, default_key, wait_for_entity_linking

DATA = ROOT / "bench" / "data" / "languages"
DAY = 86400


class DefaultsRun(Run):
    """A Run asking each question at threshold 0 and at the default only (no sweep)."""

    def ask(self, persona: Persona, item: dict[str, Any], *, off_topic: bool) -> None:
        question = item["question"]
        self.asked.append(
            Asked(
                persona,
                item,
                off_topic,
                zero=self.search(persona, question, 0),
                default=self.search(persona, question, None),
                swept={},
            )
        )


def files(split: str, only: set[str]) -> list[Path]:
    chosen = []
    for path in sorted(DATA.glob("*.json")):
        heldout = path.stem.endswith("-heldout")
        language = path.stem.removesuffix("-heldout")
        if only and language not in only:
            continue
        if split == "all" or (split == "heldout") == heldout:
            chosen.append(path)
    return chosen


def row(label: str, asked: list[Asked]) -> str:
    on = [a for a in asked if not a.off_topic]
    off = [a for a in asked if a.off_topic]

    def share(flags: list[bool]) -> str:
        return f"{sum(flags) / len(flags):.2f}" if flags else "-"

    returned = [a.default.first(a.answers) is not None for a in on]
    first = [a.default.first(a.answers) == 1 for a in on]
    first0 = [a.zero.first(a.answers) == 1 for a in on]
    ranks = [a.zero.first(a.answers) for a in on]
    mrr = statistics.mean(1 / r if r else 0 for r in ranks) if ranks else 0.0
    empty = [not a.default.results for a in off]
    count = statistics.median(len(a.default.results) for a in off) if off else 0
    best_on = statistics.median(a.zero.best for a in on) if on else 0
    best_off = statistics.median(a.zero.best for a in off) if off else 0
    return (
        f"{label:<18}{len(on):>4}{len(off):>5}  {share(returned):>8} {share(first):>6} "
        f"{share(first0):>8} {mrr:>6.3f}   {share(empty):>5} ({count:>4.1f})  "
        f"{best_on:>7.3f} {best_off:>8.3f}"
    )


def report(run: Run, names: dict[str, str]) -> None:
    print(f"-- {run.host}")
    print(
        f"{'file':<18}{'on':>4}{'off':>5}  {'returned':>8} {'first':>6} {'first@0':>8} "
        f"{'MRR@0':>6}   {'off empty':>12}  {'best on':>7} {'best off':>8}"
    )
    by_file: dict[str, list[Asked]] = defaultdict(list)
    by_language: dict[str, list[Asked]] = defaultdict(list)
    for asked in run.asked:
        by_file[names[asked.persona.user_id]].append(asked)
        by_language[asked.persona.data.get("language", "?")].append(asked)
    for name, group in by_file.items():
        print(row(name, group))
    if len(by_language) < len(by_file):
        for language, group in sorted(by_language.items()):
            print(row(f"[{language}]", group))
    print(row("all", run.asked))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--split", choices=("fit", "heldout", "all"), default="all")
    parser.add_argument("--only", default="", help="comma-separated language codes")
    parser.add_argument("--host", default=default_host())
    parser.add_argument("--api-key", default=default_key())
    parser.add_argument("--also-host", action="append", default=[])
    args = parser.parse_args()
    if not args.api_key:
        sys.exit("No API key: run `make run` first, or pass --api-key / set ENGRAM_API_KEY.")
    only = {code for code in args.only.split(",") if code}
    paths = files(args.split, only)
    if not paths:
        sys.exit(f"no data files in {DATA} for --split {args.split} --only {args.only}")
    tag = uuid.uuid4().hex[:8]
    personas, names = [], {}
    for path in paths:
        for data in json.loads(path.read_text())["personas"]:
            # As bench/assistant.py names its scopes (bench/judging.py reads them).
            user_id = f"{data['user_id']}-assistant-{tag}"
            personas.append(Persona(data, user_id, [key_words(f) for f in data["facts"]]))
            names[user_id] = path.stem
    api = Api(args.host, args.api_key)
    hosts = [args.host, *args.also_host]
    summary = RunSummary.start(*hosts)
    started = time.perf_counter()
    print(f"command: {' '.join(sys.argv)}")
    print(f"data: {len(paths)} files, {len(personas)} personas")
    try:
        start = int(time.time()) - 29 * DAY
        with summary.phase("ingest (add, infer=false)", "facts") as added:
            stored, add_times = store_raw(api, personas, start)
            added.count = len(add_times)
        print(f"stored raw (infer=false), one add per fact: {stored} memories")
        wait_for_entity_linking()
        runs: list[Run] = [DefaultsRun(h, Api(h, args.api_key), "raw") for h in hosts]
        for server in runs:
            for _ in range(20):
                server.search(personas[0], "warm up", None)
            server.latencies.clear()
        with summary.phase(f"search (HTTP, {len(runs)} server(s) in turn)", "searches") as done:
            evaluate(runs, personas)
            done.count = sum(len(server.latencies) for server in runs)
        for server in runs:
            report(server, names)
    finally:
        for persona in personas:
            api.call("DELETE", f"/v1/entities/user/{persona.user_id}/")
    print(f"total {time.perf_counter() - started:.0f}s")
    summary.report()


if __name__ == "__main__":
    main()
