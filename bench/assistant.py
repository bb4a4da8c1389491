"""Retrieval quality for a personal assistant: short first-person facts about one user, and
questions about that user, through the public API.

The data set, bench/data/assistant.json, was written by hand for this benchmark (original text;
how: bench/data/README.md). It holds personas, each a scope of 25-35 short first-person facts as
an assistant stores them, with questions that the facts answer and questions they do not:

    {"personas": [{
        "user_id": "dana",           # the scope's id, made unique per run ("dana-<run>")
        "name": "Dana",              # how the questions name the user
        "name_fact": 1,              # the fact that states the name ("My name is Dana."), or null
        "facts": ["I lived in Austin until 2024.", "My name is Dana.", ...],
        "questions": [               # answerable: `answers`, the facts that answer it (indexes)
            {"question": "Where does Dana live?", "answers": [2], "stale": [0], "kind": "named"},
            ...],
        "off_topic": [               # about something the scope never mentions
            {"question": "What is Dana's blood type?", "near_miss": false, "kind": "named",
             "cite": []},
            ...]}]}

`kind`: named (the user in the third person, by name: "What's Dana's cat called?"),
second_person (as the user asks an assistant: "where do I live?") or unnamed ("the user", or no
one). `stale` (optional): facts that answered the question once, before its answer changed ("I
lived in Austin until 2024." / "I moved to Porto last year"); `answers` holds the current fact.
`near_miss`: the scope mentions something close (a sister, and the question asks about a
brother; the cello, and it asks about the violin). `cite`: the facts a good assistant would
still want in front of it to reply, "no" included (the sister, for "Does Dana have a brother?";
her peanut allergy, for "Is she allergic to shellfish?"), labelled afterwards by a reader who saw
the facts and questions only (bench/data/README.md); a question with none is about something the
scope never mentions. The personas vary their names: short, long,
a two-word first name, non-English names, one that is also a common word, and one whose name
the facts never state (name_fact null; its questions still name it).

Each persona's facts go into a scope of their own (a user id unique to the run), one add request
per fact, a day apart (`timestamp`, the last one today), as an assistant adds facts over time:

  --mode raw (default): infer=false, each fact's index in its memory's `metadata` ({"fact": i});
     the script waits until the worker has linked them to their entities (as bench/locomo.py
     does). A returned memory holds the fact its metadata names.
  --mode infer: infer=true (the offline extractor when the server has no ANTHROPIC_API_KEY),
     round by round: fact i of every persona, then waiting until those events have finished
     (GET /v1/event/{id}/), so each scope's facts are extracted in order. A returned memory
     holds a fact when its text has the fact's key words: at least KEY_SHARE of the fact's
     words of three or more letters (any number) outside STOP_WORDS, compared lower-cased with
     a final "s" dropped. The rule is approximate: a model may reword a fact, merge two, or
     write one that shares most words with another.

Each answerable question is a search of its scope (POST /v3/memories/search/, top_k 10) at the
API's default threshold (no `threshold` sent), at threshold 0 and at each of THRESHOLDS; each
off-topic question too. It prints, per question kind and overall:
  - top-1 (a fact that answers the question ranked first), recall@3, recall@10 and MRR, at
    threshold 0 and at the default threshold (and how often the default returns nothing);
  - name first: how often the persona's name fact ranks first (threshold 0) for a question that
    does not ask about the name;
  - changed answers: the current fact first, above the stale one, or the stale one first;
  - off-topic: the share returning nothing at the default threshold, the median number of
    results there, and the median best score (threshold 0) of off-topic against answerable
    questions; for all of them, near misses or not, with a fact to cite or nothing to cite, and
    per kind;
  - for each threshold t: answerable top-1 kept (an answer ranked first and returned) against
    off-topic empty, as the API answers `threshold=t` and as a cut of the threshold-0 results at
    score >= t (the score the caller sees), so a threshold can be chosen;
  - per persona: top-1 and MRR (threshold 0), name first, off-topic empty at the default;
then search and add latency (p50/p95/p99) and the run summary (common.RunSummary): facts added
and searches per second, and the peak RSS of the client, web server, worker and postgres.

--failures N also prints, from the first server, N answerable questions (from each persona in
turn) whose first result is not an answer (the top three results with their score breakdown, and where the answer ranked),
and N off-topic questions that return something at the default threshold.

--also-host URL (repeatable) asks the same questions of the same stored facts through another
server on the same database (e.g. one running the previous commit), prints the tables per server, and for how many questions each server's
results at threshold 0 (ids, in order) are identical to the first server's. Each question goes
to every server in turn, the order rotating, so their latencies are measured alike.

The run's users are erased at the end (DELETE /v1/entities/user/{id}/).

    make run   # in another terminal (or any engram URL + key)
    .venv/bin/python bench/assistant.py [--mode raw|infer] [--data bench/data/assistant.json]
        [--host URL --api-key KEY] [--also-host URL ...] [--failures N] [--limit N]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path
from typing import Any

from common import (
    ROOT,
    Api,
    RunSummary,
    default_host,
    default_key,
    fmt_ms,
    percentiles,
    wait_for_entity_linking,
)

KINDS = ("named", "second_person", "unnamed")
THRESHOLDS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
TOP_K = 10
DAY = 86400
# --mode infer: a memory holds a fact when it has this share of the fact's key words.
KEY_SHARE = 0.6
# fmt: off
STOP_WORDS = frozenset({
    "a", "an", "the", "and", "or", "but", "so", "of", "in", "on", "at", "to", "for", "from",
    "with", "by", "about", "as", "into", "than", "then", "too", "very", "is", "are", "was",
    "were", "be", "been", "being", "am", "do", "does", "did", "have", "has", "had", "not", "no",
    "can", "don", "won", "isn", "doesn", "didn", "just", "still", "now", "also",
    "all", "any", "some", "every", "this", "that", "these", "those", "there", "here", "what",
    "which", "who", "whom", "when", "where", "why", "how", "i", "me", "my", "mine", "myself",
    "we", "us", "our", "you", "your", "he", "him", "his", "she", "her", "they", "them", "their",
    "it", "its", "user"
})
# fmt: on


def key_words(text: str) -> frozenset[str]:
    """A text's words for the --mode infer rule: lower-cased, three or more letters (or a
    number), not a stop word, a final "s" dropped ("ferrets" and "ferret" match)."""
    words = re.findall(r"\w+", text.lower())
    return frozenset(
        w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w
        for w in words
        if (len(w) >= 3 or w.isdigit()) and w not in STOP_WORDS
    )


def holds(memory: frozenset[str], fact: frozenset[str]) -> bool:
    """Whether a memory's key words include KEY_SHARE of a fact's (--mode infer)."""
    return bool(fact) and len(memory & fact) >= max(1, math.ceil(KEY_SHARE * len(fact)))


@dataclass
class Persona:
    data: dict[str, Any]
    user_id: str
    keys: list[frozenset[str]] = field(default_factory=list)  # each fact's key words

    @property
    def name_fact(self) -> int | None:
        return self.data.get("name_fact")


@dataclass
class Found:
    """One search's results, best first, and for each the facts it holds."""

    results: list[dict[str, Any]]
    facts: list[frozenset[int]]

    @property
    def best(self) -> float:
        return float(self.results[0]["score"]) if self.results else 0.0

    def first(self, wanted: set[int]) -> int | None:
        """The rank (from 1) of the first result holding one of `wanted`."""
        return next((i for i, held in enumerate(self.facts, 1) if held & wanted), None)


@dataclass
class Asked:
    """One question asked of one server: its results at threshold 0, at the API's default and
    at each of THRESHOLDS."""

    persona: Persona
    item: dict[str, Any]
    off_topic: bool
    zero: Found
    default: Found
    swept: dict[float, Found]

    @property
    def answers(self) -> set[int]:
        return set(self.item.get("answers", []))

    def asks_name(self) -> bool:
        return self.persona.name_fact in self.answers


@dataclass
class Run:
    """One server's searches."""

    host: str
    api: Api
    mode: str
    asked: list[Asked] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)

    def search(self, persona: Persona, query: str, threshold: float | None) -> Found:
        body: dict[str, Any] = {
            "query": query,
            "filters": {"user_id": persona.user_id},
            "top_k": TOP_K,
        }
        if threshold is not None:
            body["threshold"] = threshold
        result, elapsed = self.api.call("POST", "/v3/memories/search/", json=body)
        self.latencies.append(elapsed)
        results = result["results"]
        return Found(results, [held_facts(r, persona, self.mode) for r in results])

    def ask(self, persona: Persona, item: dict[str, Any], *, off_topic: bool) -> None:
        question = item["question"]
        self.asked.append(
            Asked(
                persona,
                item,
                off_topic,
                zero=self.search(persona, question, 0),
                default=self.search(persona, question, None),
                swept={t: self.search(persona, question, t) for t in THRESHOLDS},
            )
        )


def held_facts(result: dict[str, Any], persona: Persona, mode: str) -> frozenset[int]:
    if mode == "raw":
        index = (result.get("metadata") or {}).get("fact")
        return frozenset() if index is None else frozenset({index})
    words = key_words(result.get("memory") or "")
    return frozenset(i for i, keys in enumerate(persona.keys) if holds(words, keys))


# --- storing the facts ---


def add_body(persona: Persona, index: int, start: int, *, infer: bool) -> dict[str, Any]:
    return {
        "messages": [{"role": "user", "content": persona.data["facts"][index]}],
        "user_id": persona.user_id,
        "infer": infer,
        "metadata": {"fact": index},
        "timestamp": start + index * DAY,
    }


def store_raw(api: Api, personas: list[Persona], start: int) -> tuple[int, list[float]]:
    stored, timings = 0, []
    for persona in personas:
        for index in range(len(persona.data["facts"])):
            result, elapsed = api.call(
                "POST", "/v3/memories/add/", json=add_body(persona, index, start, infer=False)
            )
            timings.append(elapsed)
            stored += sum(1 for r in result["results"] if r["event"] == "ADD")
    return stored, timings


def store_inferred(
    api: Api, personas: list[Persona], start: int, timeout: float = 600
) -> tuple[Counter[str], list[float], list[float]]:
    """Fact i of every persona, then wait for those events; the events' outcomes (status and
    extractor), the add latencies and each event's time to finish (as the client sees it)."""
    outcomes: Counter[str] = Counter()
    timings, waits = [], []
    for index in range(max(len(p.data["facts"]) for p in personas)):
        pending: dict[str, float] = {}
        for persona in personas:
            if index < len(persona.data["facts"]):
                body = add_body(persona, index, start, infer=True)
                result, elapsed = api.call("POST", "/v3/memories/add/", json=body)
                timings.append(elapsed)
                pending[result["event_id"]] = time.perf_counter()
        deadline = time.perf_counter() + timeout
        while pending and time.perf_counter() < deadline:
            for event_id in list(pending):
                event, _ = api.call("GET", f"/v1/event/{event_id}/")
                if event["status"] in ("SUCCEEDED", "FAILED"):
                    waits.append((time.perf_counter() - pending.pop(event_id)) * 1000)
                    outcomes[f"{event['status']} ({event.get('extractor') or '?'})"] += 1
            time.sleep(0.2 if pending else 0)
        outcomes["unfinished"] += len(pending)
    return outcomes, timings, waits


def stored_memories(api: Api, persona: Persona) -> list[str]:
    result, _ = api.call("POST", "/v2/memories/", json={"filters": {"user_id": persona.user_id}})
    rows = result["results"] if isinstance(result, dict) else result
    return [row["memory"] for row in rows]


def coverage(api: Api, personas: list[Persona]) -> None:
    """--mode infer: the memories extracted, and how many facts some memory holds (the rule)."""
    memories, facts, held = 0, 0, 0
    for persona in personas:
        texts = [key_words(t) for t in stored_memories(api, persona)]
        memories += len(texts)
        facts += len(persona.keys)
        held += sum(any(holds(t, keys) for t in texts) for keys in persona.keys)
    print(f"extracted: {memories} memories from {facts} facts; {held} facts held by a memory")


# --- the figures ---


def share(flags: list[bool]) -> float:
    return sum(flags) / len(flags) if flags else 0.0


def median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def ranking_row(asked: list[Asked], found: str) -> str:
    """top-1, recall@3, recall@10, MRR (and how many return nothing) of the answerable questions,
    from their results at `found` ("zero" or "default")."""
    top1, r3, r10, mrr, empty = [], [], [], [], []
    for a in asked:
        results: Found = getattr(a, found)
        first = results.first(a.answers)
        top1.append(first == 1)
        for k, column in ((3, r3), (10, r10)):
            seen = frozenset().union(*results.facts[:k])
            column.append(len(a.answers & seen) / len(a.answers))
        mrr.append(1 / first if first else 0.0)
        empty.append(not results.results)
    cells = (share(top1), statistics.fmean(r3), statistics.fmean(r10), statistics.fmean(mrr))
    return "".join(f"{v:8.3f}" for v in cells) + f"{share(empty):8.3f}"


def name_first(asked: list[Asked]) -> str:
    """Of the questions that do not ask about the name, in scopes that state it: how many rank
    the name fact first (threshold 0)."""
    eligible = [a for a in asked if a.persona.name_fact is not None and not a.asks_name()]
    hits = sum(a.persona.name_fact in (a.zero.facts[0] if a.zero.facts else ()) for a in eligible)
    return f"{hits / max(1, len(eligible)):8.3f} ({hits}/{len(eligible)})"


def groups(asked: list[Asked]) -> list[tuple[str, list[Asked]]]:
    rows = [(kind, [a for a in asked if a.item["kind"] == kind]) for kind in KINDS]
    return [*[(k, rows_) for k, rows_ in rows if rows_], ("overall", asked)]


def report_answerable(asked: list[Asked]) -> None:
    head = f"{'top-1':>8}{'r@3':>8}{'r@10':>8}{'MRR':>8}{'empty':>8}"
    print(f"{'kind':<15}{'n':>5}   threshold 0{' ' * 28}| default threshold")
    print(f"{'':<20}{head}  |{head}  | name first (threshold 0)")
    for label, rows in groups(asked):
        print(
            f"{label:<15}{len(rows):>5}{ranking_row(rows, 'zero')}  |"
            f"{ranking_row(rows, 'default')}  |{name_first(rows)}"
        )
    changed = [a for a in asked if a.item.get("stale")]
    current, above, stale = 0, 0, 0
    for a in changed:
        now, before = a.zero.first(a.answers), a.zero.first(set(a.item["stale"]))
        current += now == 1
        above += now is not None and (before is None or now < before)
        stale += before == 1
    print(
        f"changed answers ({len(changed)}, threshold 0): current fact first {current}, "
        f"above the stale one {above}, stale fact first {stale}"
    )


def report_off_topic(asked: list[Asked], answerable: list[Asked]) -> None:
    print(
        f"{'off-topic':<15}{'n':>5}{'empty@default':>15}{'median n@default':>18}"
        f"{'median best@0':>15}  name first (threshold 0)"
    )
    rows = [
        ("all", asked),
        ("not near miss", [a for a in asked if not a.item["near_miss"]]),
        ("near miss", [a for a in asked if a.item["near_miss"]]),
        ("nothing to cite", [a for a in asked if not a.item.get("cite", [])]),
        ("a fact to cite", [a for a in asked if a.item.get("cite", [])]),
        *[(k, [a for a in asked if a.item["kind"] == k]) for k in KINDS],
    ]
    for label, group in rows:
        if not group:
            continue
        empty = share([not a.default.results for a in group])
        count = median([len(a.default.results) for a in group])
        best = median([a.zero.best for a in group])
        print(
            f"{label:<15}{len(group):>5}{empty:>15.3f}{count:>18.1f}{best:>15.3f}{name_first(group)}"
        )
    print(
        f"median best score, threshold 0: answerable {median([a.zero.best for a in answerable]):.3f} "
        f"(answer first: {median([a.zero.best for a in answerable if a.zero.first(a.answers) == 1]):.3f})"
        f", off-topic {median([a.zero.best for a in asked]):.3f}; at the default threshold "
        f"(0 when empty): answerable {median([a.default.best for a in answerable]):.3f}, "
        f"off-topic {median([a.default.best for a in asked]):.3f}"
    )


def report_thresholds(answerable: list[Asked], off_topic: list[Asked]) -> None:
    """Answerable top-1 kept against off-topic empty, per threshold: as the API answers
    `threshold=t`, and as a cut of the threshold-0 results at score >= t."""
    near = [a for a in off_topic if a.item["near_miss"]]
    print(f"{'':>9}| API threshold=t{' ' * 30}| threshold-0 results cut at score >= t")
    print(
        f"{'t':>9}|{'top-1 kept':>12}{'off empty':>11}{'near empty':>12}{'median n':>10} "
        f"|{'top-1 kept':>12}{'off empty':>11}{'near empty':>12}"
    )
    for t in THRESHOLDS:
        api_top1 = share([a.swept[t].first(a.answers) == 1 for a in answerable])
        api_empty = share([not a.swept[t].results for a in off_topic])
        api_near = share([not a.swept[t].results for a in near])
        count = median([len(a.swept[t].results) for a in off_topic])
        cut_top1 = share([a.zero.first(a.answers) == 1 and a.zero.best >= t for a in answerable])
        cut_empty = share([a.zero.best < t for a in off_topic])
        cut_near = share([a.zero.best < t for a in near])
        print(
            f"{t:>9.2f}|{api_top1:>12.3f}{api_empty:>11.3f}{api_near:>12.3f}{count:>10.1f} "
            f"|{cut_top1:>12.3f}{cut_empty:>11.3f}{cut_near:>12.3f}"
        )


def report_personas(run: Run) -> None:
    print(
        f"{'persona':<15}{'n':>5}{'top-1@0':>9}{'MRR@0':>8}  {'name first':<16}"
        f"{'off-topic':>10}{'empty@default':>15}"
    )
    for persona in dict.fromkeys(a.persona.user_id for a in run.asked):
        asked = [a for a in run.asked if a.persona.user_id == persona]
        answerable = [a for a in asked if not a.off_topic]
        off_topic = [a for a in asked if a.off_topic]
        first = [a.zero.first(a.answers) for a in answerable]
        named = asked[0].persona.data["name"]
        print(
            f"{named:<15}{len(answerable):>5}{share([f == 1 for f in first]):>9.3f}"
            f"{statistics.fmean([1 / f if f else 0.0 for f in first]):>8.3f}"
            f"{name_first(answerable):<18}{len(off_topic):>8}"
            f"{share([not a.default.results for a in off_topic]):>15.3f}"
        )


def report(run: Run) -> None:
    answerable = [a for a in run.asked if not a.off_topic]
    off_topic = [a for a in run.asked if a.off_topic]
    print(f"-- {run.host}: {len(answerable)} answerable, {len(off_topic)} off-topic questions")
    report_answerable(answerable)
    report_off_topic(off_topic, answerable)
    report_thresholds(answerable, off_topic)
    report_personas(run)
    print(
        f"search latency (HTTP, incl. query embedding): {fmt_ms(percentiles(run.latencies))} "
        f"over {len(run.latencies)}"
    )


def describe(result: dict[str, Any]) -> str:
    b = result.get("score_breakdown") or {}
    return (
        f"{result['score']:.3f} (sem {b.get('semantic', 0):.3f} bm25 {b.get('bm25', 0):.3f} "
        f"ent {b.get('entity', 0):.3f}) {result.get('memory')!r}"
    )


def interleave(asked: list[Asked]) -> list[Asked]:
    """Questions in turn from each persona, so a few examples span them all."""
    by_persona: dict[str, list[Asked]] = {}
    for a in asked:
        by_persona.setdefault(a.persona.user_id, []).append(a)
    rounds = zip_longest(*by_persona.values())
    return [a for row in rounds for a in row if a is not None]


def show_failures(run: Run, count: int) -> None:
    wrong = interleave([a for a in run.asked if not a.off_topic and a.zero.first(a.answers) != 1])
    print(f"-- {len(wrong)} answerable questions whose first result (threshold 0) is not an answer")
    for a in wrong[:count]:
        first = a.zero.first(a.answers)
        print(f"{a.persona.data['name']}: {a.item['question']!r}, answer ranked {first or '>10'}")
        if first:
            print(f"    answer: {describe(a.zero.results[first - 1])}")
        for result in a.zero.results[:3]:
            print(f"    {describe(result)}")
    noisy = interleave([a for a in run.asked if a.off_topic and a.default.results])
    print(f"-- {len(noisy)} off-topic questions returning results at the default threshold")
    for a in noisy[:count]:
        print(f"{a.persona.data['name']}: {a.item['question']!r}, {len(a.default.results)} results")
        print(f"    {describe(a.default.results[0])}")


# --- the run ---


def evaluate(runs: list[Run], personas: list[Persona]) -> None:
    """Every question of every server in turn, the order rotating per question."""
    index = 0
    for persona in personas:
        items = [(q, False) for q in persona.data["questions"]]
        items += [(q, True) for q in persona.data["off_topic"]]
        for item, off_topic in items:
            rotation = index % len(runs)
            for run in runs[rotation:] + runs[:rotation]:
                run.ask(persona, item, off_topic=off_topic)
            index += 1


def summarise_data(personas: list[Persona]) -> str:
    questions = [q for p in personas for q in p.data["questions"]]
    off = [q for p in personas for q in p.data["off_topic"]]
    kinds = Counter(q["kind"] for q in questions)
    return (
        f"{len(personas)} personas, {sum(len(p.data['facts']) for p in personas)} facts, "
        f"{len(questions)} answerable questions ("
        + ", ".join(f"{kinds[k]} {k}" for k in KINDS)
        + f"; {sum(bool(q.get('stale')) for q in questions)} with a changed answer), "
        f"{len(off)} off-topic ({sum(q['near_miss'] for q in off)} near misses)"
    )


def store(api: Api, personas: list[Persona], mode: str, summary: RunSummary) -> list[float]:
    """Store every persona's facts (--mode), timed as the ingest phase; the add latencies."""
    # A day apart, the last fact today.
    start = int(time.time()) - (max(len(p.data["facts"]) for p in personas) - 1) * DAY
    if mode == "raw":
        with summary.phase("ingest (add, infer=false)", "facts") as added:
            stored, add_times = store_raw(api, personas, start)
            added.count = len(add_times)
        print(f"stored raw (infer=false), one add per fact: {stored} memories")
        wait_for_entity_linking()
        return add_times
    label = "ingest (add, infer=true, incl. waiting for extraction)"
    with summary.phase(label, "facts") as added:
        outcomes, add_times, waits = store_inferred(api, personas, start)
        added.count = len(add_times)
    print(f"stored through infer=true, one add per fact: events {dict(outcomes)}")
    print(f"event time to finish (client-side): {fmt_ms(percentiles(waits))}")
    wait_for_entity_linking()
    coverage(api, personas)
    return add_times


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", default=str(ROOT / "bench" / "data" / "assistant.json"))
    parser.add_argument("--host", default=default_host())
    parser.add_argument("--api-key", default=default_key())
    parser.add_argument("--mode", choices=("raw", "infer"), default="raw")
    parser.add_argument("--limit", type=int, default=0, help="only the first N personas")
    parser.add_argument(
        "--also-host",
        action="append",
        default=[],
        help="also evaluate through this server (e.g. the previous commit's); repeatable",
    )
    parser.add_argument(
        "--failures", type=int, default=0, help="print N failing questions of each sort"
    )
    args = parser.parse_args()
    if not args.api_key:
        sys.exit("No API key: run `make run` first, or pass --api-key / set ENGRAM_API_KEY.")
    data = json.loads(Path(args.data).read_text())
    api = Api(args.host, args.api_key)
    tag = uuid.uuid4().hex[:8]
    personas = [
        Persona(p, f"{p['user_id']}-assistant-{tag}", [key_words(f) for f in p["facts"]])
        for p in data["personas"][: args.limit or None]
    ]
    hosts = [args.host, *args.also_host]
    summary = RunSummary.start(*hosts)
    started = time.perf_counter()
    print(f"command: {' '.join(sys.argv)}")
    print(f"data: {args.data} — {summarise_data(personas)}")
    try:
        add_times = store(api, personas, args.mode, summary)
        runs = [Run(h, Api(h, args.api_key), args.mode) for h in hosts]
        for server in runs:
            for _ in range(20):  # each web worker loads the embedding model on its first search
                server.search(personas[0], "warm up", None)
            server.latencies.clear()
        with summary.phase(f"search (HTTP, {len(runs)} server(s) in turn)", "searches") as searched:
            evaluate(runs, personas)
            searched.count = sum(len(server.latencies) for server in runs)
        for server in runs:
            report(server)
        for server in runs[1:]:
            same = sum(
                [r["id"] for r in a.zero.results] == [r["id"] for r in b.zero.results]
                for a, b in zip(runs[0].asked, server.asked, strict=True)
            )
            print(
                f"rankings (threshold 0) of {server.host} identical to {runs[0].host}'s: "
                f"{same} of {len(server.asked)} questions"
            )
        if args.failures:
            show_failures(runs[0], args.failures)
    finally:
        for persona in personas:
            api.call("DELETE", f"/v1/entities/user/{persona.user_id}/")
    print(
        f"add latency per fact (infer={'true' if args.mode == 'infer' else 'false'}): "
        f"{fmt_ms(percentiles(add_times))} over {len(add_times)}"
    )
    print(f"total {time.perf_counter() - started:.0f}s")
    summary.report()


if __name__ == "__main__":
    main()
