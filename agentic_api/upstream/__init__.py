"""The client for vLLM / llm-d: stateless /v1/responses, SSE parsing, error mapping."""
