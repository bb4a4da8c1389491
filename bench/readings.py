"""How a question naming the user is read, measured on the embedder alone (no keywords, no
entities, no database): the assistant sets' questions of kind "named", each ranked against its
persona's facts by the cosine with the question's vector, read

  - "the user": the name as "the user" (memory.text.query.neutralise), as search did before;
  - "first person": in the user's own words (memory.text.query.first_person: "Where do I live?");
  - "both": the mean direction of the two (memory.text.embeddings.embed_query with both
    readings), as search does.

The facts are ranked as they are (first person, as said and as the offline extractor keeps
them) and rewritten in the third person as a model extractor writes them ("I'm a nurse." ->
"The user is a nurse.", by a few fixed substitutions: THIRD_PERSON). The name fact is left in.
It prints, per data set, fact form and reading: top-1 (a fact that answers the question ranked
first) and MRR, and the area under the ROC curve of the best cosine of answerable questions
against that of off-topic questions with nothing to cite (the name fact left out for those).

Facts go through the full model (as stored), questions through the query model (int8 by
default, ENGRAM_QUERY_PRECISION), as search does.

    .venv/bin/python bench/readings.py [--data bench/data/assistant.json ...]

(the environment of .local/engram.env is read; ENGRAM_LOCAL_MODEL picks the model)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("ENGRAM_LOG_LEVEL", "WARNING")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import load_local_env

load_local_env()

HERE = Path(__file__).resolve().parent
DATA = [HERE / "data" / "assistant.json", HERE / "data" / "assistant-heldout.json"]
# First person to third, in order (the longer forms first).
THIRD_PERSON = [
    (r"\bI'm\b", "the user is"),
    (r"\bI am\b", "the user is"),
    (r"\bI've\b", "the user has"),
    (r"\bI have\b", "the user has"),
    (r"\bI'd\b", "the user would"),
    (r"\bI'll\b", "the user will"),
    (r"\bI\b", "the user"),
    (r"\b[Mm]y\b", "the user's"),
    (r"\bme\b", "the user"),
    (r"\b[Ww]e\b", "the user and family"),
    (r"\b[Oo]ur\b", "their"),
]
READINGS = ("the user", "first person", "both")


def third_person(fact: str) -> str:
    for pattern, replacement in THIRD_PERSON:
        fact = re.sub(pattern, replacement, fact)
    return fact[:1].upper() + fact[1:]


def auc(positive: list[float], negative: list[float]) -> float:
    """The chance that a random answerable question's best cosine is above a random off-topic
    one's (ties count half)."""
    pairs = [(p > n) + 0.5 * (p == n) for p in positive for n in negative]
    return sum(pairs) / len(pairs) if pairs else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", nargs="+", type=Path, default=DATA)
    args = parser.parse_args()

    import django

    django.setup()
    import numpy as np

    from memory.text.embeddings import active_space, embed, embed_query
    from memory.text.query import first_person, neutralise

    def vectors(question: str, name: str) -> dict[str, np.ndarray]:
        own = {name.lower()}
        neutral = neutralise(question, own, "the user")[0]
        said = first_person(question, own)
        return {
            "the user": np.array(embed_query(neutral)),
            "first person": np.array(embed_query(said)),
            "both": np.array(embed_query(neutral, said)),
        }

    started = time.perf_counter()
    print(f"command: {' '.join(sys.argv)}")
    print(f"model: {active_space().name}")
    print(f"{'data':26} {'facts':13} {'reading':13} {'n':>4} {'top-1':>7} {'MRR':>7} {'AUC':>7}")
    for path in args.data:
        personas = json.loads(path.read_text())["personas"]
        for form in ("first person", "third person"):
            ranks: dict[str, list[int]] = {r: [] for r in READINGS}
            best: dict[str, list[float]] = {r: [] for r in READINGS}
            off: dict[str, list[float]] = {r: [] for r in READINGS}
            for persona in personas:
                facts = persona["facts"]
                if form == "third person":
                    facts = [third_person(f) for f in facts]
                matrix = np.array(embed(facts))
                for question in persona["questions"]:
                    if question["kind"] != "named":
                        continue
                    for reading, vector in vectors(question["question"], persona["name"]).items():
                        cosines = matrix @ vector
                        order = list(np.argsort(-cosines))
                        ranks[reading].append(min(order.index(a) for a in question["answers"]) + 1)
                        best[reading].append(max(float(cosines[a]) for a in question["answers"]))
                for question in persona.get("off_topic", []):
                    if question.get("cite"):
                        continue
                    for reading, vector in vectors(question["question"], persona["name"]).items():
                        cosines = matrix @ vector
                        if persona["name_fact"] is not None:
                            cosines[persona["name_fact"]] = -1.0
                        off[reading].append(float(cosines.max()))
            for reading in READINGS:
                rs = ranks[reading]
                top1 = sum(r == 1 for r in rs) / len(rs)
                mrr = sum(1 / r for r in rs) / len(rs)
                print(
                    f"{path.name:26} {form:13} {reading:13} {len(rs):4d} {top1:7.3f} {mrr:7.3f} "
                    f"{auc(best[reading], off[reading]):7.3f}"
                )
    print(f"total {time.perf_counter() - started:.0f}s")


if __name__ == "__main__":
    main()
