"""Memories: storage, the one way to write them, the one way to read them, and their surfaces.

Layers, each importing only from the layers below it (tests/config/test_layers.py checks them,
function-level imports included, and that no module imports itself back):

    api/ (DRF), mcp/, web/ (dashboards), admin, management commands
        entry points: parse and check input, analyse the query and embed text, then call a
        use case inside one tenant context (tenants.db.project_context), and render
    extraction/     the worker's pipeline: reads through queries, writes through actions
    search.py       the search use case, for every entry point
    actions/        the only writers of memory state: one transaction each, history rows, rules
    queries/        the only readers: request-free, by project and typed arguments
    retrieval/      hybrid search (and its choice of exact scan or index), scoring, filters
    graph/          entities and relations on Apache AGE
    jobs.py         the worker's jobs, sent by name
    models.py       Memory, MemoryHistory, MemoryEvent, ...
    text/           text analysis: the embedder, the entity recogniser, time windows, a query
"""
