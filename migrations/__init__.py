"""Alembic migrations: one tree for SQLite and PostgreSQL."""
