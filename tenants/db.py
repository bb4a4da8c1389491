"""Row-level security plumbing: the per-transaction tenant context, policies and grants.

Every tenant-scoped table carries `project_id` and a policy comparing it with
`engram_current_project()`, which reads the transaction-local setting `engram.project_id`.
Without that setting a query sees no rows and can write none.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, LiteralString

from django.apps import apps
from django.conf import settings
from django.db import connections, migrations, transaction
from psycopg import sql

SETTING = "engram.project_id"
_ACTIVE = "_engram_active_project"  # on the connection: the tenant it last set (see below)

CURRENT_PROJECT_FUNCTION = f"""
CREATE OR REPLACE FUNCTION engram_current_project() RETURNS uuid
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT NULLIF(current_setting('{SETTING}', true), '')::uuid $$;
"""


def activate_project(project_id: uuid.UUID | str | None, using: str = "default") -> None:
    """Make `project_id` the tenant of the current transaction (SET LOCAL semantics).

    None clears it: the transaction then sees no tenant rows.
    """
    connection = connections[using]
    if not connection.in_atomic_block:
        raise RuntimeError("activate_project() needs a transaction: use project_context().")
    value = "" if project_id is None else str(project_id)
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config(%s, %s, true)", [SETTING, value])
    connection.__dict__[_ACTIVE] = value


def active_project(using: str = "default") -> uuid.UUID | None:
    with connections[using].cursor() as cursor:
        cursor.execute("SELECT engram_current_project()")
        row = cursor.fetchone()
    return row[0] if row else None


@contextmanager
def project_context(
    project_id: uuid.UUID | str | None,
    using: str = "default",
    *,
    before_commit: Callable[[], None] | None = None,
    savepoint: bool = True,
) -> Iterator[None]:
    """Run the block in a transaction whose tenant is `project_id`.

    The one way every entry point gets its tenant: API requests (memory.api), workers,
    management commands, and the dashboards to come. Nested use (an action called inside a
    caller's context) is a savepoint and restores the outer tenant on exit, since SET LOCAL
    outlives a released savepoint. `before_commit` runs at the end of a block that raised
    nothing, inside its transaction (the API writes its access-log row there, so the row
    commits with what it records).

    `savepoint=False`: nested, the block takes no savepoint (two round trips fewer). For a write
    whose failure always ends its caller's transaction, such as the steps of an add request:
    after a failure inside such a block, Django refuses every further statement until the
    outer block ends, so a caller that tried to go on would fail loudly, never half-commit.
    """
    connection = connections[using]
    nested = connection.in_atomic_block
    wanted = "" if project_id is None else str(project_id)
    outer = _current(connection, using) if nested else None
    try:
        with transaction.atomic(using=using, savepoint=savepoint):
            # Nested in the same tenant (an action inside a view's transaction): a savepoint,
            # no round trips to set the tenant again.
            if outer != wanted:
                activate_project(project_id, using)
            yield
            if before_commit is not None:
                before_commit()
            if nested and outer != wanted:
                activate_project(outer or None, using)
    finally:
        # After a rollback the database is back to the outer value (none, outside any
        # transaction); so is the mirror.
        connection.__dict__[_ACTIVE] = outer


def _current(connection: Any, using: str) -> str:
    """The tenant of the open transaction: as project_context last set it on this connection
    (no round trip), or else as the database says. The mirror is written only by
    activate_project and restored on every exit of project_context, so it matches the
    database's transaction-local setting."""
    mirrored: str | None = connection.__dict__.get(_ACTIVE)
    if mirrored is not None:
        return mirrored
    found = active_project(using)
    return "" if found is None else str(found)


@contextmanager
def same_tenant(using: str, source: str = "default") -> Iterator[None]:
    """Run the block in a project_context on `using` (the read replica) whose tenant is that of
    `source`'s open transaction; outside one there is none, so RLS shows nothing, as on `source`."""
    connection = connections[source]
    tenant = _current(connection, source) if connection.in_atomic_block else ""
    with project_context(tenant or None, using=using):
        yield


def enable_row_level_security(table: str) -> migrations.RunSQL:
    """Migration operation: enable and force RLS on `table` with the project policy."""
    return migrations.RunSQL(
        sql=[
            f'ALTER TABLE "{table}" ENABLE ROW LEVEL SECURITY',
            f'ALTER TABLE "{table}" FORCE ROW LEVEL SECURITY',
            f'CREATE POLICY project_isolation ON "{table}" '
            "USING (project_id = engram_current_project()) "
            "WITH CHECK (project_id = engram_current_project())",
        ],
        reverse_sql=[
            f'DROP POLICY IF EXISTS project_isolation ON "{table}"',
            f'ALTER TABLE "{table}" NO FORCE ROW LEVEL SECURITY',
            f'ALTER TABLE "{table}" DISABLE ROW LEVEL SECURITY',
        ],
    )


# Tables where the application role gets less than SELECT, INSERT, UPDATE, DELETE, and why.
NARROW_PRIVILEGES: dict[str, LiteralString] = {
    # Written by migrate (the owner); reading it lets `migrate --check` run as the app.
    "django_migrations": "SELECT",
    # Rows made by migrate (post_migrate, as the owner); the admin and auth only read them.
    "django_content_type": "SELECT",
    "auth_permission": "SELECT",
    # The app mints keys (create_api_key, make run's demo key), renames and revokes them,
    # refreshes last_used_at, and deletes them with their project; it never changes a key's
    # hash, prefix or project once made.
    "tenants_apikey": "SELECT, INSERT, DELETE, UPDATE (name, last_used_at, revoked_at)",
}

# SECURITY DEFINER functions (owned by the owner role) the application role may EXECUTE, and
# no other role: the one way into the append-only tables (audit migration 0008, GDPR erasure).
APP_FUNCTIONS: tuple[LiteralString, ...] = (
    "engram_erase_user(uuid, text, text, text, boolean)",
    # Redaction of memories and retention purges (audit migration 0012).
    "engram_erase_memories(uuid, uuid[], boolean, text, text, text, text, boolean)",
    "engram_purge_events(uuid, timestamptz, text, text, boolean)",
)


def grant_runtime_privileges(using: str = "default", **kwargs: Any) -> None:
    """After each migrate, give the application role what it needs and no more.

    Runs as the owner role, in one transaction: everything is revoked and granted again, so
    a narrowed grant also takes effect on a database migrated before. Tables whose model sets
    `APPEND_ONLY = True` get INSERT and SELECT only (their triggers also refuse UPDATE and
    DELETE, for every role); NARROW_PRIVILEGES lists the others that get less than full DML.
    Of the functions, it may EXECUTE those of APP_FUNCTIONS (and what PUBLIC may).
    """
    connection = connections[using]
    role: str = settings.ENGRAM_DB_APP_ROLE
    if not role or role == connection.settings_dict.get("USER"):
        return
    append_only = [m._meta.db_table for m in apps.get_models() if getattr(m, "APPEND_ONLY", False)]
    ident = sql.Identifier(role)
    with connection.cursor() as cursor:
        # public holds the models; dramatiq the job queue's tables (memory/extraction/broker.py).
        cursor.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname IN ('public', 'dramatiq') "
            "ORDER BY nspname DESC"
        )
        schemas = [sql.Identifier(row[0]) for row in cursor.fetchall()]
        cursor.execute(
            "SELECT relname FROM pg_class WHERE relname = ANY(%s) AND relkind = 'r' "
            "AND relnamespace = 'public'::regnamespace",
            [list(NARROW_PRIVILEGES)],
        )
        narrowed = [row[0] for row in cursor.fetchall()]
        # Of the append-only tables, those that exist (migrating backwards removes some).
        cursor.execute(
            "SELECT relname FROM pg_class WHERE relname = ANY(%s) AND relkind = 'r' "
            "AND relnamespace = 'public'::regnamespace",
            [append_only],
        )
        append_only = [row[0] for row in cursor.fetchall()]
        # Those that exist yet (a database migrated part of the way has not all of them).
        functions = [f for f in APP_FUNCTIONS if _function_exists(cursor, f)]
    grants = (
        "GRANT USAGE ON SCHEMA {} TO {}",
        "REVOKE ALL ON ALL TABLES IN SCHEMA {} FROM {}",
        "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {} TO {}",
        "GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {} TO {}",
    )
    statements = [sql.SQL(g).format(schema, ident) for schema in schemas for g in grants]
    for table in narrowed:
        privileges = sql.SQL(NARROW_PRIVILEGES[table])
        statements += [
            sql.SQL("REVOKE ALL ON {} FROM {}").format(sql.Identifier(table), ident),
            sql.SQL("GRANT {} ON {} TO {}").format(privileges, sql.Identifier(table), ident),
        ]
    statements += [
        sql.SQL("REVOKE UPDATE, DELETE, TRUNCATE ON {} FROM {}").format(sql.Identifier(t), ident)
        for t in append_only
    ]
    for function in functions:
        statements += [
            sql.SQL("REVOKE ALL ON FUNCTION {} FROM PUBLIC, {}").format(sql.SQL(function), ident),
            sql.SQL("GRANT EXECUTE ON FUNCTION {} TO {}").format(sql.SQL(function), ident),
        ]
    with transaction.atomic(using=using), connection.cursor() as cursor:
        raw = cursor.connection
        for statement in statements:
            cursor.execute(statement.as_string(raw))


def _function_exists(cursor: Any, signature: str) -> bool:
    cursor.execute("SELECT to_regprocedure(%s) IS NOT NULL", [signature])
    row = cursor.fetchone()
    return bool(row and row[0])
