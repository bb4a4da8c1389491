"""The Mem0-compatible REST API (Django REST framework).

Views parse and validate (serializers/), embed text outside any transaction, call
memory.actions and memory.queries in one tenant context, and shape the response. They hold no
SQL and no business rules. May import memory.actions, memory.queries, memory.models,
memory.retrieval, tenants and audit (the access record); nothing below imports it.

One module of views per resource (memories, search, batch, entities, events, exports, feedback),
common.py for what they share and idempotency.py for the adds' Idempotency-Key; urls.py maps
the Mem0 paths to them. serializers/ validates requests; responses.py documents every
response body and status in the OpenAPI schema.
"""
