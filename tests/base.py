from __future__ import annotations

from typing import ClassVar

from django.test import TestCase

from tenants.actions import NewApiKey
from tests.factory import make_key


class BaseTestCase(TestCase):
    """Personas: Alice owns project acme/main; Charlie owns globex/main and sees none of it."""

    alice: ClassVar[NewApiKey]
    charlie: ClassVar[NewApiKey]

    @classmethod
    def setUpTestData(cls) -> None:
        cls.alice = make_key("acme", "main", name="alice's key")
        cls.charlie = make_key("globex", "main", name="charlie's key")
