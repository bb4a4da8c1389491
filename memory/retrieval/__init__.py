"""Retrieval: finding memories.

- search.py: hybrid search (semantic and keyword candidates in one SQL statement), and the
  choice between an exact scan and the HNSW index;
- scoring.py: fusing the signals into one score (pure functions);
- filters.py: the Mem0 filter language compiled to a Django Q (parameters only).

The query it ranks with is analysed once, by memory.text.query. May import memory.models and
memory.text (and Django, pgvector); never the graph, actions, queries, api or extraction.
"""
