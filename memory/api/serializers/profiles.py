"""User profiles: the settings (enabled, a schema, custom instructions) and the job requests.

The settings' shape is the Platform's: `enabled` at the top, the schema and instructions under
`entities.user`; a flat `schema` or `custom_instructions` (or any other key) is "Unsupported
settings". A schema is a JSON Schema object whose every property has a description (what
tells the model how to fill the field).

May import memory.api.serializers.fields, DRF and drf-spectacular.
"""

from __future__ import annotations

import json
import re
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from memory.api.serializers.fields import ScopeIdField

SCHEMA_MAX_PROPERTIES = 50
SCHEMA_MAX_CHARS = 32_000
DESCRIPTION_MAX_CHARS = 1_000
INSTRUCTIONS_MAX_CHARS = 4_000
SAMPLE_MAX = 10
SAMPLE_DEFAULT = 3
# Property names as the model's tool schemas take them.
PROPERTY_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
PROPERTY_TYPES = frozenset({"string", "number", "integer", "boolean", "array", "object"})
SCHEMA_KEYS = frozenset(
    {"type", "properties", "required", "title", "description", "$schema", "additionalProperties"}
)
USER_KEYS = frozenset({"schema", "custom_instructions"})


def unsupported(keys: Any) -> serializers.ValidationError:
    names = ", ".join(sorted(str(k) for k in keys))
    return serializers.ValidationError(
        f"Unsupported settings: {names}. Send {{'enabled'?, 'entities': {{'user': "
        "{'schema'?, 'custom_instructions'?}}}."
    )


def check_profile_schema(value: Any) -> dict[str, Any]:
    """A profile schema: an object with `properties`, each an object with a description."""
    if not isinstance(value, dict):
        raise serializers.ValidationError("The schema must be a JSON object.")
    if len(json.dumps(value, ensure_ascii=False)) > SCHEMA_MAX_CHARS:
        raise serializers.ValidationError(
            f"The schema is too large; at most {SCHEMA_MAX_CHARS} characters of JSON."
        )
    extra = set(value) - SCHEMA_KEYS
    if extra:
        raise serializers.ValidationError(f"Unsupported schema keys: {', '.join(sorted(extra))}.")
    if value.get("type", "object") != "object":
        raise serializers.ValidationError("The schema's type must be 'object'.")
    properties = value.get("properties")
    if not isinstance(properties, dict) or not properties:
        raise serializers.ValidationError("The schema needs a non-empty 'properties' object.")
    if len(properties) > SCHEMA_MAX_PROPERTIES:
        raise serializers.ValidationError(
            f"The schema has {len(properties)} properties; at most {SCHEMA_MAX_PROPERTIES}."
        )
    for name, spec in properties.items():
        check_property(name, spec)
    return value


def check_property(name: str, spec: Any) -> None:
    if not PROPERTY_NAME.fullmatch(name):
        raise serializers.ValidationError(
            f"Property {name[:64]!r}: a name is 1 to 64 characters of A-Z a-z 0-9 _ . -."
        )
    if not isinstance(spec, dict):
        raise serializers.ValidationError(f"Property {name!r} must be a JSON object.")
    description = spec.get("description")
    if not isinstance(description, str) or not description.strip():
        raise serializers.ValidationError(f"Property {name!r} needs a description.")
    if len(description) > DESCRIPTION_MAX_CHARS:
        raise serializers.ValidationError(
            f"Property {name!r}: the description has at most {DESCRIPTION_MAX_CHARS} characters."
        )
    kind = spec.get("type")
    if kind is not None and kind not in PROPERTY_TYPES:
        raise serializers.ValidationError(
            f"Property {name!r}: type must be one of {', '.join(sorted(PROPERTY_TYPES))}."
        )


@extend_schema_field(
    {
        "type": "object",
        "properties": {
            "user": {
                "type": "object",
                "properties": {
                    "schema": {"type": "object", "nullable": True, "additionalProperties": {}},
                    "custom_instructions": {"type": "string", "nullable": True},
                },
                "additionalProperties": False,
            }
        },
        "additionalProperties": False,
    }
)
class EntitiesField(serializers.JSONField):
    pass


class StrictBooleanField(serializers.BooleanField):
    """true or false only (DRF's BooleanField also takes 0, 1, "yes", "on")."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class ProfileSettingsRequestSerializer(serializers.Serializer[dict[str, Any]]):
    enabled = StrictBooleanField(required=False)
    entities = EntitiesField(required=False)

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            extra = set(data) - {"enabled", "entities", "org_id", "project_id"}
            if extra:
                raise serializers.ValidationError({"non_field_errors": unsupported(extra).detail})
        return super().to_internal_value(data)

    def validate_entities(self, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise serializers.ValidationError("must be a JSON object: {'user': {...}}.")
        if set(value) - {"user"}:
            raise unsupported(f"entities.{k}" for k in set(value) - {"user"})
        user = value.get("user", {})
        if not isinstance(user, dict):
            raise serializers.ValidationError("entities.user must be a JSON object.")
        if set(user) - USER_KEYS:
            raise unsupported(f"entities.user.{k}" for k in set(user) - USER_KEYS)
        found: dict[str, Any] = {}
        if "schema" in user:
            schema = user["schema"]
            found["schema"] = None if schema is None else check_profile_schema(schema)
        if "custom_instructions" in user:
            found["custom_instructions"] = check_instructions(user["custom_instructions"])
        return found


def check_instructions(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise serializers.ValidationError("custom_instructions must be a string or null.")
    if len(value) > INSTRUCTIONS_MAX_CHARS:
        raise serializers.ValidationError(
            f"custom_instructions has at most {INSTRUCTIONS_MAX_CHARS} characters."
        )
    return value.strip() or None


class ProfileJobRequestSerializer(serializers.Serializer[dict[str, Any]]):
    operation = serializers.ChoiceField(choices=["trigger", "sample"])
    entity_type = serializers.CharField(required=False, default="user")
    entity_id = ScopeIdField(help_text="The user (trigger).")
    limit = serializers.IntegerField(
        required=False,
        allow_null=True,
        min_value=1,
        max_value=SAMPLE_MAX,
        help_text=f"How many users to sample, 1-{SAMPLE_MAX} (default {SAMPLE_DEFAULT}).",
    )

    def validate_entity_type(self, value: str) -> str:
        if value != "user":
            raise serializers.ValidationError("Only user profiles exist; use 'user'.")
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["operation"] == "trigger" and not attrs.get("entity_id"):
            raise serializers.ValidationError({"entity_id": "is required to trigger a profile."})
        return attrs
