"""What the project and member endpoints (tenants.projects_api) take and answer.

A PATCH names only settings engram honours. A Platform setting engram has no equivalent of is
a 400 naming it (REFUSED), never silently ignored; one engram cannot change is accepted only
when it asks for what engram already does (FIXED: e.g. `decay: false`), and a 400 otherwise.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from tenants.api import Closed
from tenants.models import Membership

# The Platform's words for a role, and engram's (memory.web.common: owners and admins edit,
# readers only read). ADMIN is engram's own: the Platform has only OWNER and READER.
ROLE_WORDS: dict[str, str] = {
    Membership.Role.OWNER: "OWNER",
    Membership.Role.ADMIN: "ADMIN",
    Membership.Role.READER: "READER",
}
ROLES = {word: role for role, word in ROLE_WORDS.items()}

MAX_CATEGORIES = 100
MAX_CATEGORY_NAME = 100
MAX_RETENTION_DAYS = 36_500  # a hundred years; 0 keeps for ever

# Settings of the Platform engram has no equivalent of, with the reason and what to do instead.
REFUSED = {
    "memory_depth": "engram has one extraction depth; it cannot be set.",
    "usecase_setting": "engram has no use-case presets; write custom_instructions instead.",
    "usecase": "engram has no use-case presets; write custom_instructions instead.",
    "inclusion_prompt": "engram's name for it is includes.",
    "exclusion_prompt": "engram's name for it is excludes.",
    "update_custom_instructions": "engram has no separate instructions for updates.",
    "summary_custom_instructions": "engram has no separate instructions for summaries.",
    "summary_batch_size": "the server sets how often summaries refresh (ENGRAM_SUMMARY_EVERY).",
    "summary_max_tokens": "the server sets the model's limits (ENGRAM_LLM_MAX_TOKENS).",
    "expiration_date": "engram takes expiration_date per memory, not per project.",
    "version": "engram answers every API version the clients use; it cannot be set.",
    "active_prompt_profile": "engram has no prompt profiles.",
    "is_default": "engram has no default project.",
}


def fixed_settings() -> dict[str, Any]:
    """Platform settings engram cannot change, at the value engram always has."""
    return {
        # Extraction writes memories in the language and script of the messages.
        "multilingual": True,
        # Search ranks without access-based decay.
        "decay": False,
        # The server extracts a graph, or not, for every project (ENGRAM_GRAPH_EXTRACTION).
        "enable_graph": bool(settings.ENGRAM_GRAPH_EXTRACTION),
        # Agent memories are extracted with the project's custom_instructions.
        "agent_custom_instructions": None,
    }


# Keys a client may send that are not settings: the 1.x clients add org_id and project_id to
# every body (checked against the path by the view).
ADDRESS_KEYS = ("org_id", "project_id")


class InstructionsField(serializers.CharField):
    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        kwargs.setdefault("allow_blank", True)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        value = super().to_internal_value(data)
        limit = settings.ENGRAM_MAX_TEXT_CHARS
        if len(value) > limit:
            raise serializers.ValidationError(f"is {len(value)} characters; the limit is {limit}.")
        return value


def validate_categories(value: Any) -> list[Any]:
    """Mem0's two forms: names, or one-key objects {"name": "description"}; kept as given."""
    if not isinstance(value, list):
        raise serializers.ValidationError(
            'must be a list of names or of {"name": "description"} objects.'
        )
    if len(value) > MAX_CATEGORIES:
        raise serializers.ValidationError(
            f"holds {len(value)} categories; at most {MAX_CATEGORIES}."
        )
    for item in value:
        if isinstance(item, dict) and len(item) == 1:
            name, description = next(iter(item.items()))
            if not isinstance(description, str):
                raise serializers.ValidationError(f"the description of {name!r} must be text.")
        elif isinstance(item, str):
            name = item
        else:
            raise serializers.ValidationError(
                'each category is a name or a {"name": "description"} object.'
            )
        if not name.strip() or len(name) > MAX_CATEGORY_NAME:
            raise serializers.ValidationError(
                f"a category name must be 1 to {MAX_CATEGORY_NAME} characters."
            )
    names = [next(iter(i)) if isinstance(i, dict) else i for i in value]
    if len({n.strip().lower() for n in names}) != len(names):
        raise serializers.ValidationError("names a category twice.")
    return value


@extend_schema_field(
    {
        "type": "array",
        "maxItems": MAX_CATEGORIES,
        "items": {
            "oneOf": [
                {"type": "string", "minLength": 1, "maxLength": MAX_CATEGORY_NAME},
                {
                    "type": "object",
                    "minProperties": 1,
                    "maxProperties": 1,
                    "additionalProperties": {"type": "string"},
                },
            ]
        },
        "description": 'Names, or {"name": "description"} objects; names unique (any case).',
    }
)
class CategoriesField(serializers.JSONField):
    def to_internal_value(self, data: Any) -> list[Any]:
        return validate_categories(super().to_internal_value(data))


class RetentionField(serializers.IntegerField):
    def __init__(self, **kwargs: Any) -> None:
        kwargs.update(min_value=0, max_value=MAX_RETENTION_DAYS, allow_null=True, required=False)
        super().__init__(**kwargs)


class ProjectUpdateSerializer(Closed):
    """PATCH: the settings to change (at least one)."""

    name = serializers.CharField(max_length=200, required=False)
    description = InstructionsField(required=False)
    custom_instructions = InstructionsField(required=False)
    custom_categories = CategoriesField(required=False)
    includes = InstructionsField(
        required=False, help_text="What extraction only remembers (an add's own replace it)."
    )
    excludes = InstructionsField(
        required=False, help_text="What extraction never remembers (an add's own replace it)."
    )
    deleted_retention_days = RetentionField(
        help_text="Days a deleted memory is kept before it is erased; null: the server's "
        "default (ENGRAM_DELETED_RETENTION_DAYS); 0: for ever."
    )
    event_retention_days = RetentionField(
        help_text="Days an add request's messages and results are kept; null: the server's "
        "default (ENGRAM_EVENT_RETENTION_DAYS); 0: for ever."
    )
    # The Platform's settings engram cannot change: accepted at engram's value only (a 400
    # otherwise). Not enums in the schema: drf-spectacular would make each a shared component.
    multilingual = serializers.BooleanField(
        required=False, help_text="Only true: memories keep the language of the messages."
    )
    decay = serializers.BooleanField(
        required=False, help_text="Only false: search does not rank by recent use."
    )
    enable_graph = serializers.BooleanField(
        required=False, help_text="Only the server's ENGRAM_GRAPH_EXTRACTION."
    )
    agent_custom_instructions = serializers.CharField(
        required=False,
        allow_null=True,
        allow_blank=True,
        help_text='Only null or "": agent memories use custom_instructions.',
    )
    org_id = serializers.CharField(required=False, help_text="Ignored if it is the path's.")
    project_id = serializers.CharField(required=False, help_text="Ignored if it is the path's.")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        sent = self.initial_data if isinstance(self.initial_data, dict) else {}
        for key in sent:
            if key in REFUSED:
                raise serializers.ValidationError({key: REFUSED[key]})
            if key not in self.fields:
                raise serializers.ValidationError({key: "is not a project setting of engram."})
        fixed = fixed_settings()
        for key, value in attrs.items():
            if key in fixed and (value or None) != (fixed[key] or None):
                raise serializers.ValidationError(
                    {key: f"engram cannot change this: it is always {fixed[key]!r}."}
                )
        if not set(attrs) - set(fixed) - set(ADDRESS_KEYS):
            raise serializers.ValidationError("Give at least one setting to change.")
        return attrs

    def changes(self) -> dict[str, Any]:
        """The settings to write (tenants.actions.PROJECT_SETTINGS)."""
        skipped = {*fixed_settings(), *ADDRESS_KEYS}
        return {k: v for k, v in self.validated_data.items() if k not in skipped}


class ProjectCreateSerializer(serializers.Serializer[dict[str, Any]]):
    """POST: the new project's name and description; any other key is a 400 naming it."""

    name = serializers.CharField(max_length=200)
    description = InstructionsField(required=False)
    org_id = serializers.CharField(required=False, help_text="Ignored if it is the path's.")
    project_id = serializers.CharField(
        required=False, help_text="Ignored if it is the key's project."
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        sent = self.initial_data if isinstance(self.initial_data, dict) else {}
        unknown = sorted(set(sent) - set(self.fields))
        if unknown:
            raise serializers.ValidationError(
                {unknown[0]: "unknown field; known: name, description."}
            )
        return attrs


class RoleField(serializers.ChoiceField):
    """OWNER, ADMIN or READER (any case); engram's role."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(choices=list(ROLES), **kwargs)

    def to_internal_value(self, data: Any) -> str:
        word = str(data).upper() if isinstance(data, str) else data
        return ROLES[super().to_internal_value(word)]


class MemberSerializer(Closed):
    email = serializers.EmailField(max_length=254)
    role = RoleField(
        required=False, default=Membership.Role.READER.value, help_text="OWNER, ADMIN or READER."
    )


class MemberEmailSerializer(serializers.Serializer[dict[str, Any]]):
    email = serializers.EmailField(max_length=254)


# -- responses -------------------------------------------------------------------------------


class MemberRowSerializer(Closed):
    username = serializers.CharField()
    email = serializers.CharField()
    role = RoleField()


class MembersSerializer(Closed):
    members = MemberRowSerializer(many=True)


class ProjectSerializer(Closed):
    """The project; with `fields`, only those keys."""

    project_id = serializers.UUIDField(required=False)
    name = serializers.CharField(required=False)
    description = serializers.CharField(required=False)
    created_at = serializers.DateTimeField(required=False)
    members = MemberRowSerializer(many=True, required=False)
    user_role = serializers.CharField(
        allow_null=True,
        required=False,
        help_text="The role the API key acts with (its creator's in the organization): OWNER, "
        "ADMIN or READER; null if none.",
    )
    custom_instructions = serializers.CharField(required=False)
    custom_categories = serializers.ListField(child=serializers.JSONField(), required=False)
    includes = serializers.CharField(required=False)
    excludes = serializers.CharField(required=False)
    deleted_retention_days = serializers.IntegerField(allow_null=True, required=False)
    event_retention_days = serializers.IntegerField(allow_null=True, required=False)
    multilingual = serializers.BooleanField(required=False)
    decay = serializers.BooleanField(required=False)
    enable_graph = serializers.BooleanField(required=False)
    agent_custom_instructions = serializers.CharField(allow_null=True, required=False)


PROJECT_FIELDS = tuple(ProjectSerializer().fields)


class ProjectMessageSerializer(Closed):
    message = serializers.CharField()


class CreatedProjectSerializer(Closed):
    message = serializers.CharField()
    project_id = serializers.UUIDField()
