"""Pydantic models of the public wire format we accept and emit."""
