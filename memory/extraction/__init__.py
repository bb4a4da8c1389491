"""Extraction: turning an add request (a MemoryEvent) into memories, off the request path.

- pipeline.py: claim an event, build the context, extract, retrieve neighbours, decide, and
  apply the decisions through memory.actions (the pipeline decides; actions write).
- llm.py: the Extractor interface, Claude through the anthropic SDK (forced tool calls), and
  the deterministic offline extractor.
- tasks.py: the Dramatiq actors (thin: ids in, pipeline out); broker.py: the Postgres broker.

May import memory.models, memory.actions, memory.queries, memory.retrieval and tenants; nothing
imports it but the apps' start-up (the actors), the on-commit enqueue in memory.actions and
the sweep_events command.
"""
