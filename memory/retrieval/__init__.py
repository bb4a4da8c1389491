"""Retrieval: finding memories.

- search.py: hybrid search (semantic and keyword candidates in one SQL statement);
- scoring.py: fusing the signals into one score (pure functions);
- filters.py: the Mem0 filter language compiled to a Django Q (parameters only);
- embeddings.py: the Embedder interface, the local ONNX model and a hosted API.

May import memory.models (and Django, pgvector); never actions, api or extraction.
"""
