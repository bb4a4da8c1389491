"""Memories: storage, the one way to write them, the one way to read them, and their surfaces.

Layers, each importing only from the layers below it:

    api/ (DRF), web/ (dashboards), admin, management commands, extraction/ (workers)
        entry points: parse and check input, embed text, then call actions and queries
        inside one tenant context (tenants.db.project_context)
    actions.py      the only writers of memory state: one transaction each, history rows, rules
    queries/        the only readers: request-free, by project and typed arguments
    retrieval/      search, scoring, the filter language, embeddings
    models.py       Memory, MemoryHistory, MemoryEvent, ...; search as a QuerySet method
"""
