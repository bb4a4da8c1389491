"""The graph: entities and their relations, one Apache AGE graph per project (issue #9).

Owns: the AGE graph of each project (vertices `Entity`, edges `RELATES`), the Cypher that reads and
writes it, and the relational memory <-> entity index (memory.models.MemoryEntity) kept consistent
with it, the vector of each scope's entity name (memory.models.EntityVector, for search's matching
by meaning). May import memory.models, memory.text and tenants only. Its users: memory.actions
(extraction's writes through do_record_graph; relations retracted and reinstated with the memories
behind them), memory.queries (the API's reads), memory.extraction (the contradiction check's read,
the linking job); search reads MemoryEntity and EntityVector itself and never imports the graph.
GDPR erasure (engram_erase_user, audit 0010) is the one path that deletes graph rows.

Reads by one exact scope (traverse, relations) serve the pipeline; the HTTP API reads across
scopes the way search filters (ScopeMatch: named ids equal, "*" any value, the others unset;
EdgeFilter adds validity and "asserted by a memory of this queryset"): relations_in,
count_relations_in, traverse_in, relations_touching_in, and relations_of_memories for search's
enable_graph. Those are plain SQL over the label tables, values as parameters.

Tenant isolation:

- Graph name. A project's graph is `g_` + the project's UUID in hex (graph_name): derived, never
  taken from input, checked against ^g_[0-9a-f]{32}$ before it is placed in a query.
- First wall, in code. Every function takes the project id and runs inside
  tenants.db.project_context(project), so the tenant of the transaction and the graph named in
  the query are the same project by construction.
- Creation. The app role cannot create schemas. engram_ensure_graph(project) (owner-owned,
  SECURITY DEFINER, fixed search_path; memory migration 0012) creates the graph, its labels and
  indexes on first use and grants the calling role USAGE on the graph's schema, SELECT / INSERT
  / UPDATE on its label tables and USAGE on its id sequences: no DELETE, no DDL (the app cannot
  add labels or drop the graph). It refuses any project but engram_current_project(), so from
  A's context nobody can create, or be granted, B's graph.
- Second wall, row-level security. Each table of a graph's schema has a forced policy
  `engram_current_project() = '<that project>'` (USING and WITH CHECK). Reads see nothing of
  another project's graph, or anything without a tenant. The store writes vertices and edges
  with plain SQL INSERT / UPDATE on the label tables, which the policies check, so writes are
  walled too. (AGE 1.5's own Cypher CREATE / MERGE would insert around WITH CHECK policies and
  triggers: the store uses no Cypher write but SET on already visible rows. The grants are per
  role, not per tenant: the app role holds USAGE on every graph it has used; the policies are
  what tell tenants apart.)
- What the wall costs: AGE's agtype functions are not LEAKPROOF, so under a policy PostgreSQL
  will not use an index for a property test on a query over ONE label table (a scan of the
  project's rows). In joins the constant policy test becomes a one-time filter and the indexes
  serve, so every hot lookup joins its table to itself or to the other label (the entity
  lookup by name, edge lookups, traversal steps: see bench/graph.py's plans).
- AGE 1.5 also checks no table privileges on its own writes: a Cypher DELETE works without the
  DELETE grant (plain SQL DELETE is refused). So no query here deletes (a test reads them all);
  edges are invalidated, never erased. GDPR erasure of a user's vertices and edges is for the
  database-side purge path.

Values reach Cypher only as parameters: AGE's third cypher() argument, an agtype map sent as a
server-side bound parameter (psycopg binds it as $1; AGE refuses a literal there). The only
text formatted into a query is the checked graph name and integers (traversal depth).
"""

from memory.graph.store import (
    ENTITY_LABEL,
    MAX_DEPTH,
    MAX_LIMIT,
    RELATION_LABEL,
    Entity,
    Relation,
    Scope,
    Traversal,
    ensure_graph,
    find_entity,
    graph_name,
    invalidate_relations,
    link_memory,
    lock_entities,
    memory_ids_for_entities,
    normalise_name,
    normalise_relationship,
    relations,
    relations_touching,
    traverse,
    upsert_entity,
    upsert_relation,
)

__all__ = [
    "ENTITY_LABEL",
    "MAX_DEPTH",
    "MAX_LIMIT",
    "RELATION_LABEL",
    "Entity",
    "Relation",
    "Scope",
    "Traversal",
    "ensure_graph",
    "find_entity",
    "graph_name",
    "invalidate_relations",
    "link_memory",
    "lock_entities",
    "memory_ids_for_entities",
    "normalise_name",
    "normalise_relationship",
    "relations",
    "relations_touching",
    "traverse",
    "upsert_entity",
    "upsert_relation",
]

# Entity linking by the local recogniser (memory.text.recognise), run by the worker.
from memory.graph.store import MAX_KNOWN_NAMES, embed_entity_names, link_mentions

__all__ += ["MAX_KNOWN_NAMES", "embed_entity_names", "link_mentions"]

# Reads across scopes, as search filters them (the HTTP API: memory.queries graph readers).
from memory.graph.store import (  # noqa: E402
    ANY_VALUE,
    EdgeFilter,
    ScopeMatch,
    count_relations_in,
    relations_in,
    relations_of_memories,
    relations_touching_in,
    traverse_in,
)

__all__ += [
    "ANY_VALUE",
    "EdgeFilter",
    "ScopeMatch",
    "count_relations_in",
    "relations_in",
    "relations_of_memories",
    "relations_touching_in",
    "traverse_in",
]

# Retraction: the memory actions keep the edges in step with the memories behind them.
from memory.graph.store import RETRACTION, reinstate_memories, retract_memories  # noqa: E402

__all__ += ["RETRACTION", "reinstate_memories", "retract_memories"]
