from __future__ import annotations

from typing import Any, ClassVar

from django.test import TestCase

from memory.models import Memory
from tenants.actions import NewApiKey
from tenants.db import project_context
from tests.factory import auth, make_key


class BaseTestCase(TestCase):
    """Personas: Alice owns project acme/main; Charlie owns globex/main and sees none of it."""

    alice: ClassVar[NewApiKey]
    charlie: ClassVar[NewApiKey]

    @classmethod
    def setUpTestData(cls) -> None:
        cls.alice = make_key("acme", "main", name="alice's key")
        cls.charlie = make_key("globex", "main", name="charlie's key")

    def call(self, method: str, path: str, body: Any = None, who: NewApiKey | None = None) -> Any:
        """An API request as `who` (Alice by default), with a JSON body."""
        key = who or self.alice
        return getattr(self.client, method)(
            path, body, content_type="application/json", headers=auth(key.raw)
        )

    def active_texts(self, who: NewApiKey | None = None) -> set[str]:
        """Texts of the active memories of `who`'s project (Alice's by default)."""
        with project_context((who or self.alice).key.project_id):
            return set(Memory.objects.active().values_list("text", flat=True))
