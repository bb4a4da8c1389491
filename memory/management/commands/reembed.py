"""Switch a running deployment to another embedding model, without downtime for search.

Run it with the new model's settings in its environment (ENGRAM_EMBEDDER, ENGRAM_EMBEDDING_URL,
ENGRAM_EMBEDDING_MODEL, ENGRAM_EMBEDDING_DIMENSIONS, ENGRAM_EMBEDDING_SEND_DIMENSIONS, and the
key in ENGRAM_EMBEDDING_API_KEY); the rest of the deployment keeps running on the current one:

1. every memory and entity name of every project is embedded with the new model, beside the
   current vectors, which search uses all along; rows written meanwhile are picked up too;
2. the new vectors' HNSW index is built concurrently;
3. the switch: one short transaction (the tables are held while the rows written since the
   last pass get their vectors), after which the new model is the deployment's; running web
   servers and workers follow within ENGRAM_EMBEDDING_CHECK_SECONDS, no restart needed;
4. what a process wrote in those seconds, before it followed, is embedded again.

Then set the new settings for every process: one started with the old ones refuses to start
(`manage.py check --database default`). Resumable: an interrupted run (Ctrl-C, a crash, a
failing embedding service) continues where it stopped when run again with the same settings;
`--abandon` drops a build instead; `--settle` does step 4 again for a run that stopped between
the switch and its end. Memory actions (memory.actions.reembed) do the writes.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime, timedelta
from typing import Any

import psycopg
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm  # type: ignore[import-untyped]  # no stubs shipped

from memory.actions import reembed as write
from memory.queries import embedding as read
from memory.text.embeddings import Space, build_embedder, configured_space, recorded_space

BATCH = 128
# Tries at the switch's short lock before giving up (each waits write.LOCK_TIMEOUT at most).
SWITCH_ATTEMPTS = 5


def _settle_window() -> tuple[datetime, datetime]:
    """From the last switch to when every process had followed it (and a minute more)."""
    current = read.space("current")
    if current is None or current.switched_at is None:
        raise CommandError("The deployment has not switched models: nothing to settle.")
    margin = timedelta(seconds=settings.ENGRAM_EMBEDDING_CHECK_SECONDS + 60)
    return current.switched_at - timedelta(seconds=5), current.switched_at + margin


class Command(BaseCommand):
    help = (
        "Switch the deployment to the embedding model this command's settings name "
        "(ENGRAM_EMBEDDER, ENGRAM_EMBEDDING_URL, ENGRAM_EMBEDDING_MODEL, "
        "ENGRAM_EMBEDDING_DIMENSIONS): every memory and entity name is embedded again beside the "
        "current vectors, which search keeps using, then the new ones take their place in one "
        "short transaction and running processes follow. Resumable; --status shows where a "
        "switch stands, --abandon drops one."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--status", action="store_true", help="show the current model and any switch"
        )
        parser.add_argument(
            "--abandon", action="store_true", help="drop the switch under way, keep the current"
        )
        parser.add_argument(
            "--batch", type=int, default=BATCH, help=f"texts embedded at a time ({BATCH})"
        )
        parser.add_argument(
            "--no-switch",
            action="store_true",
            help="build the new vectors and their index, but do not switch yet (run again to)",
        )
        parser.add_argument(
            "--settle",
            action="store_true",
            help="embed again what was written around the last switch (when a run stopped "
            "between 'Switched' and 'Done')",
        )
        parser.add_argument(
            "--no-progress", action="store_true", help="no progress bar (none off a terminal)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        current = recorded_space()
        if current is None:
            raise CommandError("No embedding model is recorded: run `manage.py migrate` first.")
        if options["status"]:
            self._status(current)
            return
        if options["abandon"]:
            dropped = write.do_abandon()
            self.stdout.write("Switch abandoned." if dropped else "No switch was under way.")
            return
        if options["settle"]:
            again = self._settle(build_embedder(current), *_settle_window(), int(options["batch"]))
            self.stdout.write(f"{again} vectors written around the last switch made again.")
            return
        target = configured_space()
        if target.same_model(current):
            self.stdout.write(
                f"The deployment already uses {current.name} ({current.dimensions} dimensions): "
                "nothing to do. Run reembed with the new model's settings."
            )
            return
        batch = max(1, int(options["batch"]))
        try:
            building = write.do_begin(target)
        except write.SwitchError as exc:
            raise CommandError(str(exc)) from None
        embedder = build_embedder(target)
        self.stdout.write(
            f"Switching from {current.name} ({current.dimensions}) to {target.name} "
            f"({target.dimensions} dimensions)."
        )
        self._build(embedder, target, batch, show=not options["no_progress"])
        if options["no_switch"]:
            self.stdout.write("Built; run reembed again with these settings to switch.")
            return
        switched = self._switch(building, embedder, target, batch)
        self.stdout.write(
            f"Switched: the deployment now embeds with {target.name} (the tables were held "
            f"{switched.held * 1000:.0f} ms)."
        )
        # Processes follow within the check interval; what they wrote before is made again.
        time.sleep(settings.ENGRAM_EMBEDDING_CHECK_SECONDS + 1)
        again = self._settle(embedder, switched.started, None, batch)
        self.stdout.write(
            f"Done ({again} vectors written during the switch made again). Set the new "
            "settings for every process: one started with the old ones refuses to start."
        )

    def _build(self, embedder: Any, target: Space, batch: int, *, show: bool) -> None:
        """Every vector of the new space, then its index, then what was written meanwhile."""
        started = time.perf_counter()
        projects = read.project_ids()
        total = sum(read.missing_count(p) for p in projects)
        with tqdm(total=total, unit="vector", disable=not (show and sys.stderr.isatty())) as bar:
            self._fill(projects, embedder, target, batch, bar)
        seconds = time.perf_counter() - started
        self.stdout.write(
            f"Built {total} vectors in {seconds:.1f} s ({total / max(seconds, 1e-9):.0f}/s)."
        )
        self.stdout.write("Building the new vectors' index (reads and writes go on)...")
        started = time.perf_counter()
        write.do_build_index(target.dimensions)
        self.stdout.write(f"Index built in {time.perf_counter() - started:.1f} s.")
        self._fill(read.project_ids(), embedder, target, batch, None)  # written meanwhile

    def _fill(
        self, projects: list[Any], embedder: Any, target: Space, batch: int, bar: Any
    ) -> None:
        """Embed every row without a vector in the new space, project by project, batch by
        batch (a row written or changed meanwhile is found by the next pass)."""
        for project_id in projects:
            write.do_write_redacted(project_id, target.dimensions)
            while rows := read.missing_memories(project_id, batch):
                vectors = embedder.embed([r.text for r in rows])
                write.do_write_memories(project_id, [(r.id, r.hash) for r in rows], vectors)
                if bar is not None:
                    bar.update(len(rows))
            while names := read.missing_entities(project_id, batch):
                vectors = embedder.embed([n.text for n in names])
                write.do_write_entities(project_id, [int(n.id) for n in names], vectors)
                if bar is not None:
                    bar.update(len(names))

    def _switch(self, building: Any, embedder: Any, target: Space, batch: int) -> write.Switched:
        """The switch, tried again while other transactions hold the tables too long, or after
        another pass when too much was written since the last one."""
        for attempt in range(1, SWITCH_ATTEMPTS + 1):
            try:
                return write.do_switch(building, embedder.embed)
            except write.SwitchError as exc:
                raise CommandError(str(exc)) from None
            except write.WrittenMeanwhile:
                self.stdout.write("Much was written meanwhile; one more pass first...")
                self._fill(read.project_ids(), embedder, target, batch, None)
                continue
            except psycopg.errors.LockNotAvailable:
                if attempt == SWITCH_ATTEMPTS:
                    raise CommandError(
                        "Other transactions held the tables too long for the switch: run "
                        "reembed again (nothing was switched; the new vectors are kept)."
                    ) from None
                self.stdout.write("The tables are busy; trying the switch again...")
                time.sleep(attempt)
        raise CommandError(
            "Rows kept being written faster than the switch could take them: run reembed again "
            "(nothing was switched; the new vectors are kept)."
        )

    def _settle(self, embedder: Any, since: Any, until: Any, batch: int) -> int:
        """Embed again, in the current space, what was written from `since` (to `until`)."""
        count = 0
        for project_id in read.project_ids():
            after = None
            while True:
                memories, entities = read.written_since(project_id, since, until, after, batch)
                if not memories and (after is not None or not entities):
                    break
                write.do_write_current(
                    project_id,
                    [(m.id, m.hash) for m in memories],
                    embedder.embed([m.text for m in memories]),
                    [int(e.id) for e in entities] if after is None else [],
                    embedder.embed([e.text for e in entities]) if after is None else [],
                )
                count += len(memories) + (len(entities) if after is None else 0)
                if not memories:
                    break
                after = memories[-1].id
        return count

    def _status(self, current: Space) -> None:
        self.stdout.write(f"Current: {current.name} ({current.dimensions} dimensions).")
        building = read.space("building")
        if building is None:
            self.stdout.write("No switch under way.")
            return
        left = sum(read.missing_count(p) for p in read.project_ids())
        self.stdout.write(
            f"Switch under way to {building.name} ({building.dimensions} dimensions): "
            f"{left} vectors left to build."
        )
