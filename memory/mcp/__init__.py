"""The MCP (Model Context Protocol) surface: agents reach their memories through tools.

tools.py defines the tools once, with the names and arguments of Mem0's hosted MCP server, on
the official SDK's MCPServer; each calls the same serializers, readers and writers as the REST
API (memory.api.serializers and common, memory.queries, memory.actions, memory.retrieval)
inside the caller's tenant transaction. scope.py holds the connection's fixed scope ids.
http.py is the streamable-HTTP endpoint (/mcp/), a DRF view that authenticates the API key and
hands the JSON-RPC exchange to the SDK in the request's own thread; stdio.py is the `engram-mcp`
console script, which serves the same tools over stdio by relaying them to an engram server.

May import memory.actions, memory.queries, memory.models, memory.retrieval, memory.api (its
serializers and shared helpers), tenants, audit and config; nothing else imports it (config.urls
includes memory.mcp.urls by name).
"""
