"""The admin API's response shapes (pydantic): views, residency, token accounts, re-warms."""
