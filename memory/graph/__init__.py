"""The graph: entities and their relations, one Apache AGE graph per project.

Owns: the AGE graph of each project (vertices `Entity`, edges `RELATES`), the Cypher that reads and
writes it, and the relational memory <-> entity index (memory.models.MemoryEntity) kept consistent
with it, the vector of each scope's entity name (memory.models.EntityVector, for search's matching
by meaning). May import memory.models, memory.text and tenants only. Its users: memory.actions
(extraction's writes through do_record_graph; relations retracted and reinstated with the memories
behind them), memory.queries (the API's reads), memory.extraction (the contradiction check's read,
the linking job); search reads MemoryEntity and EntityVector itself and never imports the graph.
GDPR erasure (engram_erase_user, audit 0010) is the one path that deletes graph rows.

Reads by one exact scope (traverse, relations) serve the pipeline; the HTTP API reads across
scopes the way search filters (ScopeMatch: named ids equal, "*" any value, None unset;
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

Modules, each importing only those listed before it: values (names, scopes, entities,
relations, what a read across scopes matches), statements (the text of every SQL and Cypher
statement), age (the graph's name and creation, running statements, agtype rows as values),
reads (one exact scope), writes (entities, relations, the memory <-> entity index and the
entity names' vectors), mentions (linking by the local recogniser), filtered (reads across
scopes) and retraction (relations following the memories behind them). This package is their
public interface: callers import from memory.graph, not from its modules.
"""

from memory.graph.age import ENTITY_LABEL, RELATION_LABEL, ensure_graph, graph_name
from memory.graph.filtered import (
    count_relations_in,
    relations_in,
    relations_of_memories,
    relations_touching_in,
    traverse_in,
)
from memory.graph.mentions import MAX_KNOWN_NAMES, link_mentions
from memory.graph.reads import (
    entities_by_id,
    find_entity,
    memory_ids_for_entities,
    relations,
    relations_touching,
    traverse,
)
from memory.graph.retraction import (
    RETRACTION,
    memory_relations,
    reinstate_memories,
    rejoin_wording,
    retract_memories,
    revalidate_relations,
)
from memory.graph.values import (
    ANY_VALUE,
    MAX_DEPTH,
    MAX_LIMIT,
    EdgeFilter,
    Entity,
    Relation,
    Scope,
    ScopeMatch,
    Traversal,
    normalise_name,
    normalise_relationship,
)
from memory.graph.writes import (
    embed_entity_names,
    invalidate_relations,
    link_memory,
    lock_entities,
    name_vectors,
    names_embedded,
    upsert_entity,
    upsert_relation,
)

__all__ = [
    "ANY_VALUE",
    "ENTITY_LABEL",
    "MAX_DEPTH",
    "MAX_KNOWN_NAMES",
    "MAX_LIMIT",
    "RELATION_LABEL",
    "RETRACTION",
    "EdgeFilter",
    "Entity",
    "Relation",
    "Scope",
    "ScopeMatch",
    "Traversal",
    "count_relations_in",
    "embed_entity_names",
    "ensure_graph",
    "entities_by_id",
    "find_entity",
    "graph_name",
    "invalidate_relations",
    "link_memory",
    "link_mentions",
    "lock_entities",
    "memory_ids_for_entities",
    "memory_relations",
    "name_vectors",
    "names_embedded",
    "normalise_name",
    "normalise_relationship",
    "reinstate_memories",
    "rejoin_wording",
    "relations",
    "relations_in",
    "relations_of_memories",
    "relations_touching",
    "relations_touching_in",
    "retract_memories",
    "revalidate_relations",
    "traverse",
    "traverse_in",
    "upsert_entity",
    "upsert_relation",
]
