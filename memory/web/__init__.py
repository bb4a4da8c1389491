"""The dashboards: server-rendered pages for operators and for end users.

An entry point, like memory.api: it may import actions (every write), queries and retrieval
(every read), never the API's modules. Each page runs inside its project's tenant context.

- common.py: who may see a project (organization members; superusers see all) and the
  `operator_page` decorator that loads the project, checks the role and sets the context;
- views.py: login, logout, the project list and switcher;
- memories.py: a project's scopes, a scope's memories (hybrid search, filters), a memory's
  page (edit, delete, restore, history, source event);
- operations.py: events and model usage, API keys, the scope's graph;
- enduser.py: the signed, expiring end-user dashboard.
"""
