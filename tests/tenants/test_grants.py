"""The application role's privileges, read from the catalog: what the app needs and no more."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db import DatabaseError, connection, transaction

from tenants.db import APP_FUNCTIONS
from tenants.models import ApiKey
from tests.base import BaseTestCase

WRITES = ("INSERT", "UPDATE", "DELETE", "TRUNCATE")


def has_table_privilege(table: str, privilege: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT has_table_privilege(current_user, %s, %s)", [table, privilege])
        return bool(cursor.fetchone()[0])


def has_column_privilege(table: str, column: str, privilege: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT has_column_privilege(current_user, %s, %s, %s)", [table, column, privilege]
        )
        return bool(cursor.fetchone()[0])


class GrantsTestCase(BaseTestCase):
    def test_it_can_only_read_the_migration_history(self) -> None:
        assert has_table_privilege("django_migrations", "SELECT")
        for privilege in WRITES:
            assert not has_table_privilege("django_migrations", privilege), privilege

    def test_it_can_only_read_content_types_and_permissions(self) -> None:
        # Both are written by migrate (the owner); the admin only reads them.
        for table in ("django_content_type", "auth_permission"):
            assert has_table_privilege(table, "SELECT"), table
            for privilege in WRITES:
                assert not has_table_privilege(table, privilege), (table, privilege)

    def test_it_cannot_change_a_keys_hash_prefix_or_project(self) -> None:
        for column in ("key_hash", "prefix", "project_id", "id", "created_at", "created_by_id"):
            assert not has_column_privilege("tenants_apikey", column, "UPDATE"), column
        for column in ("name", "last_used_at", "revoked_at"):
            assert has_column_privilege("tenants_apikey", column, "UPDATE"), column
        # Keys are minted by the app role (create_api_key, make run's demo key).
        assert has_table_privilege("tenants_apikey", "INSERT")
        assert not has_table_privilege("tenants_apikey", "TRUNCATE")

    def test_it_is_refused_when_it_tries(self) -> None:
        for sql in (
            "UPDATE tenants_apikey SET key_hash = repeat('0', 64)",
            "INSERT INTO django_migrations (app, name, applied) VALUES ('x', 'y', now())",
            "DELETE FROM django_migrations",
        ):
            with (
                pytest.raises(DatabaseError, match="permission denied"),
                transaction.atomic(),
                connection.cursor() as cursor,
            ):
                cursor.execute(sql)

    def test_it_still_manages_users_and_sessions_for_the_admin(self) -> None:
        for table in ("auth_user", "auth_user_groups", "django_session", "django_admin_log"):
            for privilege in ("SELECT", "INSERT", "UPDATE", "DELETE"):
                assert has_table_privilege(table, privilege), (table, privilege)

    def test_it_revokes_a_key_through_the_admin(self) -> None:
        admin = get_user_model().objects.create_superuser("root", "root@example.com", "pw")
        self.client.force_login(admin)
        key = self.alice.key
        url = f"/admin/tenants/apikey/{key.pk}/change/"
        form = {"name": "renamed", "revoked_at_0": "2026-01-02", "revoked_at_1": "03:04:05"}
        response = self.client.post(url, form)
        assert response.status_code == 302, response.content.decode()[:2000]
        key = ApiKey.objects.get(pk=key.pk)
        assert (key.name, key.is_revoked, key.key_hash) == (
            "renamed",
            True,
            self.alice.key.key_hash,
        )

    def test_it_can_only_read_and_add_purge_records(self) -> None:
        assert has_table_privilege("audit_purgerecord", "SELECT")
        assert has_table_privilege("audit_purgerecord", "INSERT")
        for privilege in ("UPDATE", "DELETE", "TRUNCATE"):
            assert not has_table_privilege("audit_purgerecord", privilege), privilege

    def test_it_may_execute_the_erasure_function_and_no_other_role_may(self) -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT has_function_privilege(current_user, p.oid, 'EXECUTE'), p.prosecdef, "
                "p.proconfig, pg_get_userbyid(p.proowner) = current_user, "
                "(SELECT array_agg(a.grantee::regrole::text) FROM aclexplode(p.proacl) a "
                " WHERE a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner) "
                "FROM pg_proc p WHERE p.oid = to_regprocedure(%s)",
                [APP_FUNCTIONS[0]],
            )
            executes, definer, config, owned_by_app, grantees = cursor.fetchone()
        assert (executes, definer, owned_by_app) == (True, True, False)
        assert config == ["search_path=pg_catalog, public, pg_temp"]
        assert grantees == [connection.settings_dict["USER"]]  # not PUBLIC ("-")
