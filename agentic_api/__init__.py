"""agentic-api: an OpenAI Responses API server that owns conversation state for vLLM."""

__version__ = "0.1.0"
