"""What every scoped table shares: the scope ids' names and their longest length."""

SCOPE_FIELDS = ("user_id", "agent_id", "app_id", "run_id")
SCOPE_MAX_LENGTH = 255
