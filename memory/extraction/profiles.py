"""User profiles, built by the worker from a user's memories and graph.

A generation reads the project's settings (the schema and custom instructions), the user's
profile row and its source watermark (`changed_at`), then the user's active memories, the
most useful first and bounded (PROFILE_MAX_MEMORIES, PROFILE_INPUT_CHARS), and the relations
the graph holds about the user. With Claude (ANTHROPIC_API_KEY set) one forced tool call whose
input schema is the project's schema fills the fields; otherwise the profile is filled
deterministically: relations of known types (the graph's, and those the offline extractor's
first-person forms find in the memories) go to the fields whose name or description asks for
them (a name, where the user lives, work, family, likes, dislikes); a field nothing answers is
left out. Fewer than PROFILE_MIN_MEMORIES active memories: insufficient_data.

Profiles are kept current without touching the request path: a change to a user's memories
moves the profile's watermark (the history trigger of memory 0025); `refresh_due` (run on each
round of the sweeper, `manage.py sweep_events --loop`) sends a refresh for each profile that is
stale, unchanged for DEBOUNCE (ENGRAM_PROFILE_DEBOUNCE_SECONDS, 60 s by default), and not
generated within DEBOUNCE either. Every actor here ends on a failure: nothing is retried by
dramatiq; the failure is recorded on the profile (and the job), and the next change or API
request starts a new generation.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import dramatiq
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from memory import graph, jobs
from memory.actions import profiles as write
from memory.extraction.llm.model import ModelExtractor
from memory.extraction.llm.offline import offline_triples
from memory.extraction.llm.provider import get_extractor
from memory.extraction.llm.schemas import profile_value_fits
from memory.extraction.llm.types import ModelOutputError
from memory.models import UserProfile
from memory.queries import profiles as read
from memory.queries.profiles import ProfileSource
from tenants.models import Project

logger = logging.getLogger(__name__)

# Fewer active memories than this: the profile is insufficient_data.
PROFILE_MIN_MEMORIES = 3
# The input of one generation: at most this many memories, and this many characters of them
# (about 6,000 tokens), the most useful first (memory.queries.profiles.profile_sources).
PROFILE_MAX_MEMORIES = 200
PROFILE_INPUT_CHARS = 24_000
# At most this many of the user's relations go into the input.
PROFILE_MAX_RELATIONS = 100
# A job still RUNNING after this long lost its worker: the refresher ends it (FAILED).
STUCK_JOB = timedelta(minutes=30)
REFRESH_LOCK = "engram.refresh_profiles"


def debounce() -> timedelta:
    return timedelta(seconds=settings.ENGRAM_PROFILE_DEBOUNCE_SECONDS)


# -- the actors ---------------------------------------------------------------------------------


@dramatiq.actor(
    actor_name=jobs.RUN_PROFILE_JOB.actor_name,
    queue_name=jobs.RUN_PROFILE_JOB.queue_name,
    max_retries=0,
    time_limit=20 * 60 * 1000,
)
def run_profile_job(job_id: str, project_id: str) -> None:
    """Generate the profile of each user the job names, counting each outcome; then end it."""
    try:
        job_uuid, project = uuid.UUID(job_id), uuid.UUID(project_id)
    except (TypeError, ValueError, AttributeError):
        return
    job = write.do_start_profile_job(project, job_uuid)
    if job is None:
        return
    try:
        for user_id in job.entity_ids:
            write.do_count_profile_job(project, job_uuid, generate(project, user_id))
    finally:
        write.do_finish_profile_job(project, job_uuid)


@dramatiq.actor(
    actor_name=jobs.REFRESH_PROFILE.actor_name,
    queue_name=jobs.REFRESH_PROFILE.queue_name,
    max_retries=0,
    time_limit=5 * 60 * 1000,
)
def refresh_profile(profile_id: int, project_id: str) -> None:
    """Regenerate one stale profile (sent by refresh_due)."""
    try:
        project = uuid.UUID(project_id)
        row = read.user_profile_by_id(project, int(profile_id))
    except (TypeError, ValueError, AttributeError):
        return
    if row is not None:
        generate(project, row.user_id)


# -- the refresher ------------------------------------------------------------------------------


def refresh_due() -> int:
    """Send a refresh for every profile due one, in every project whose profiles are enabled,
    and end the jobs whose worker died; return how many refreshes were sent (0 while another
    refresher runs)."""
    now, delay, sent = timezone.now(), debounce(), 0
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(hashtext(%s))", [REFRESH_LOCK])
        row = cursor.fetchone()
        if not (row and row[0]):
            return 0
        for project_id in Project.objects.values_list("pk", flat=True):
            write.do_fail_stuck_profile_jobs(project_id, now - STUCK_JOB)
            if not read.profile_settings(project_id).enabled:
                continue
            due = read.due_profiles(project_id, now, delay)
            if due:
                sent += write.do_queue_profile_refreshes(project_id, due)
    return sent


# -- one generation -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Fact:
    """A relation about the user: (relationship, destination), from the graph or a memory."""

    relationship: str
    destination: str


def generate(project_id: uuid.UUID, user_id: str) -> str:
    """(Re)build one user's profile; return the job outcome: succeeded, skipped or failed."""
    found = read.profile_settings(project_id)
    row = read.user_profile(project_id, user_id)
    if row is None:
        return "skipped"
    if not found.enabled or not (found.schema or {}).get("properties"):
        write.do_release_profile(project_id, row.pk)
        return "skipped"
    through = row.changed_at
    if read.count_sources(project_id, user_id) < PROFILE_MIN_MEMORIES:
        write.do_record_profile(
            project_id, row.pk, status=UserProfile.Status.INSUFFICIENT_DATA, through=through
        )
        return "skipped"
    sources = bounded(read.profile_sources(project_id, user_id, PROFILE_MAX_MEMORIES))
    try:
        facts = user_facts(project_id, user_id, sources)
        profile, generator, usage = build(found.schema or {}, found.custom_instructions or "",
                                          user_id, facts, sources)  # fmt: skip
    except Exception as exc:  # any failure ends here, recorded: it never loops
        logger.warning(
            "profile of a user of project %s failed (%s)", project_id, type(exc).__name__
        )
        spent = exc.usage.counts() if isinstance(exc, ModelOutputError) else None
        write.do_record_profile(project_id, row.pk, status=UserProfile.Status.FAILED,
                                through=through, error=f"{type(exc).__name__}: {exc}",
                                usage=spent)  # fmt: skip
        return "failed"
    write.do_record_profile(
        project_id, row.pk, status=UserProfile.Status.SUCCEEDED, through=through,
        profile=profile, memory_ids=[s.id for s in sources], generator=generator, usage=usage,
    )  # fmt: skip
    return "succeeded"


def build(
    schema: dict[str, Any],
    instructions: str,
    user_id: str,
    facts: Sequence[Fact],
    sources: Sequence[ProfileSource],
) -> tuple[dict[str, Any], str, dict[str, int]]:
    """The profile, who built it (the model's provider, "claude" or "openai", or "graph")
    and the model usage it took."""
    extractor = get_extractor()
    if not isinstance(extractor, ModelExtractor):
        return fill_from_facts(schema, user_id, facts, sources), "graph", {}
    profile, spent = extractor.profile(schema, instructions, profile_prompt(facts, sources))
    return profile, extractor.name, {k: v for k, v in spent.counts().items() if v}


def bounded(sources: Sequence[ProfileSource]) -> list[ProfileSource]:
    """The first sources whose texts fit PROFILE_INPUT_CHARS together."""
    kept, used = [], 0
    for source in sources:
        used += len(source.text) + 20
        if used > PROFILE_INPUT_CHARS:
            break
        kept.append(source)
    return kept


def user_facts(project_id: uuid.UUID, user_id: str, sources: Sequence[ProfileSource]) -> list[Fact]:
    """The relations about the user: the graph's valid ones from the user's own entity (any
    scope with this user), then the offline extractor's forms over the memories' texts."""
    own = graph.normalise_name(user_id)
    edges = graph.EdgeFilter(graph.ScopeMatch.of({"user_id": user_id}))
    found = [
        Fact(r.relationship, r.destination)
        for r in graph.relations_in(project_id, edges, limit=PROFILE_MAX_RELATIONS)
        if graph.normalise_name(r.source) == own
    ]
    found += [
        Fact(relationship, destination)
        for source in sources
        for _, relationship, destination in offline_triples(source.text, user_id)
    ]
    return list(dict.fromkeys(found))


def profile_prompt(facts: Sequence[Fact], sources: Sequence[ProfileSource]) -> str:
    lines = ["## Relations known about the user"]
    lines += [f"- user -- {f.relationship} --> {f.destination}" for f in facts] or ["(none)"]
    lines.append("\n## Memories (most useful first)")
    lines += [f"- [{s.created_at.date().isoformat()}] {s.text}" for s in sources]
    return "\n".join(lines)


# -- the deterministic profile ------------------------------------------------------------------

# What a field asks for (words of its name or description) -> the relationships that answer it.
TOPICS: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("dislike", "allerg", "avoid", "hate"), ("dislikes", "allergic_to", "hates", "avoids")),
    (("name",), ("is_named", "named", "name")),
    (
        ("home", "city", "live", "location", "country", "resid", "address", "based", "where"),
        ("lives_in", "moved_to", "resides_in", "located_in", "lives_at"),
    ),
    (
        ("work", "job", "occupation", "employ", "company", "profession", "career", "role"),
        ("works_at", "works_as", "works_for", "employed_by", "occupation"),
    ),
    (
        ("family", "spouse", "partner", "child", "sibling", "parent", "pet", "relatives"),
        ("married_to", "has_"),
    ),
    (
        ("like", "interest", "hobb", "prefer", "favo", "enjoy", "love", "taste"),
        ("likes", "loves", "enjoys", "prefers", "plays", "studies", "interested_in"),
    ),
)
_NAME = re.compile(
    r"\b(?:my name is|i am called|i'm called|user's name is|user is named|name is) "
    r"(?P<name>[A-Z][\w'-]*(?: [A-Z][\w'-]*){0,2})"
)


def fill_from_facts(
    schema: dict[str, Any], user_id: str, facts: Sequence[Fact], sources: Sequence[ProfileSource]
) -> dict[str, Any]:
    """The fields of `schema` that the user's relations answer, by topic (TOPICS)."""
    properties: dict[str, Any] = schema.get("properties") or {}
    names = [m.group("name") for s in sources for m in _NAME.finditer(s.text)]
    found: dict[str, Any] = {}
    for field, spec in properties.items():
        if not isinstance(spec, dict):
            continue
        values = _answers(f"{field} {spec.get('description', '')}".lower(), facts, names)
        value = _shaped(spec, values)
        if value is not None and profile_value_fits(spec, value):
            found[field] = value
    return found


def _answers(asked: str, facts: Sequence[Fact], names: Sequence[str]) -> list[str]:
    for words, relationships in TOPICS:
        if not any(w in asked for w in words):
            continue
        if relationships[0] == "is_named":
            return list(dict.fromkeys(names))[:1]
        return list(
            dict.fromkeys(
                _phrase(f)
                for f in facts
                if any(
                    f.relationship == r or (r.endswith("_") and f.relationship.startswith(r))
                    for r in relationships
                )
            )
        )
    return []


def _phrase(fact: Fact) -> str:
    """A family relation reads "sister: Ann"; any other, its destination."""
    if fact.relationship.startswith("has_"):
        return f"{fact.relationship.removeprefix('has_').replace('_', ' ')}: {fact.destination}"
    if fact.relationship == "married_to":
        return f"spouse: {fact.destination}"
    if fact.relationship == "works_as":
        return f"works as {fact.destination}"
    return fact.destination


def _shaped(spec: dict[str, Any], values: list[str]) -> Any:
    """The values in the field's type: a list for an array, else one string joining them; a
    field of another type is left to Claude."""
    if not values:
        return None
    if spec.get("type") == "array":
        return values
    if spec.get("type") not in (None, "string"):
        return None
    return "; ".join(values)
