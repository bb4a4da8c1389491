from __future__ import annotations

from django.urls import path

from memory.mcp.http import McpView

urlpatterns = [
    # Both spellings: MCP hosts are configured with /mcp (the SDK's default) or /mcp/ (Mem0's).
    path("mcp/", McpView.as_view(), name="mcp"),
    path("mcp", McpView.as_view(), name="mcp-no-slash"),
]
