"""The clients of bench/load.py: search 80 %, add 20 % (infer=true and infer=false, half each).

bench/load.py runs these through locust's library API (and seeds the memories first); the
file also works with locust's own command line against a server whose users are seeded:

    ENGRAM_API_KEY=... ENGRAM_LOAD_RUN=<prefix> .venv/bin/locust -f bench/locustfile.py \\
        --headless -u 16 -r 16 -t 120s -H http://127.0.0.1:8000

Each simulated client is a keep-alive HTTP/1.1 connection without think time (a closed loop:
the next request leaves when the answer came), like an agent calling the API in a loop.
"""

from __future__ import annotations

import os
import random

from locust import FastHttpUser, constant, task

USERS = int(os.environ.get("ENGRAM_LOAD_USERS", "16"))
RUN = os.environ.get("ENGRAM_LOAD_RUN", "load")
TOPICS = ("green tea", "hiking in the Alps", "Lisbon", "jazz guitar", "a beagle named Max",
          "chess openings", "sushi", "Kyoto in autumn", "marathon training", "sourdough bread")  # fmt: skip
QUESTIONS = ("What does the user like to drink?", "Where did they travel?", "Which pet do they have?",
             "What sport are they training for?", "What do they bake?", "music")  # fmt: skip


def scope_user(rng: random.Random) -> str:
    return f"{RUN}-{rng.randrange(USERS)}"


class MemoryClient(FastHttpUser):
    wait_time = constant(0)

    def on_start(self) -> None:
        self.rng = random.Random()
        self.headers = {"Authorization": f"Token {os.environ['ENGRAM_API_KEY']}"}

    @task(8)
    def search(self) -> None:
        body = {"query": self.rng.choice(QUESTIONS), "user_id": scope_user(self.rng), "top_k": 10}
        self.client.post("/v1/memories/search/", json=body, headers=self.headers, name="search")

    @task(1)
    def add_queued(self) -> None:
        self._add(infer=True)

    @task(1)
    def add_raw(self) -> None:
        self._add(infer=False)

    def _add(self, *, infer: bool) -> None:
        text = f"I like {self.rng.choice(TOPICS)} (note {self.rng.randrange(10**6)})."
        # async_mode true: a queued add (without it, /v1/ waits for the worker, as mem0ai 0.1.x).
        body = {"messages": [{"role": "user", "content": text}], "user_id": scope_user(self.rng),
                "infer": infer, "async_mode": True}  # fmt: skip
        name = "add infer=true" if infer else "add infer=false"
        self.client.post("/v1/memories/", json=body, headers=self.headers, name=name)
