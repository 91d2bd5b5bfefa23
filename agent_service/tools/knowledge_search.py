"""``knowledge_search``: ranked full-text search over what ``knowledge.indexer`` loaded at start-up."""

from __future__ import annotations

from typing import Any, ClassVar

from sqlalchemy.ext.asyncio import async_sessionmaker

from agent_service.tools.base import Tool, ToolContext, ToolError
from agent_service.tools.knowledge.repository import KnowledgeRepository, query_terms

MAX_QUERY_CHARS = 500
MAX_TOP_K = 10
DEFAULT_TOP_K = 5
MAX_SNIPPET_CHARS = 400


class KnowledgeSearchTool(Tool):
    name = "knowledge_search"
    idempotent = True
    description = (
        "Search the knowledge base (the product's documentation) and return the most relevant documents "
        "with a title, path, snippet and score. Use it for questions about how the product works."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to look for", "maxLength": MAX_QUERY_CHARS},
            "top_k": {"type": "integer", "minimum": 1, "maximum": MAX_TOP_K, "description": "How many results"},
        },
        "required": ["query"],
        "additionalProperties": False,
    }

    def __init__(self, sessionmaker: async_sessionmaker) -> None:
        self.sessionmaker = sessionmaker

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ToolError("'query' (a non-empty string) is required")
        if len(query) > MAX_QUERY_CHARS:
            raise ToolError(f"the query is too long (at most {MAX_QUERY_CHARS} characters)")
        top_k = args.get("top_k", DEFAULT_TOP_K)
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
            raise ToolError(f"'top_k' must be an integer between 1 and {MAX_TOP_K}")
        terms = query_terms(query)
        if not terms:
            raise ToolError("the query must contain at least one word")
        async with self.sessionmaker() as session:
            hits = await KnowledgeRepository(session).search(terms, top_k)
        return {
            "query": query,
            "results": [
                {"title": h.title, "path": h.path, "snippet": h.snippet[:MAX_SNIPPET_CHARS], "score": h.score}
                for h in hits
            ],
        }
