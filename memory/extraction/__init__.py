"""Extraction: turning an add request (a MemoryEvent) into memories, off the request path.

- pipeline.py: the jobs a worker runs for an event, in order: claim it, build the context,
  extract, retrieve neighbours, decide, the graph step, and apply the decisions through
  memory.actions (the pipeline decides; actions write). Its steps: claims.py (the claim and its
  lease), context.py (what the extractor is shown), documents.py (text documents read),
  decide.py (facts to decisions), graph_step.py (entities, relations, contradictions) and
  apply.py (one transaction).
- llm/: the Extractor interface and result types, the prompts and tool schemas, Claude through
  the anthropic SDK (forced tool calls), and the deterministic offline extractor.
- tasks.py: the Dramatiq actors (thin: ids in, pipeline out); broker.py: the Postgres broker.

May import memory.models, memory.actions, memory.queries, memory.retrieval, memory.graph,
memory.text, memory.jobs and tenants; nothing imports it but the apps' start-up (the actors) and
the sweep_events command (memory.actions sends its jobs by name, through memory.jobs).
"""
