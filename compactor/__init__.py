"""compactor: lossless working memory for LLM agents, served over MCP stdio."""

__version__ = "0.1.0"
