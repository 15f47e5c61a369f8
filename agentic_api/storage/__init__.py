"""Persistence: SQLAlchemy models, repositories, the unit of work and dialect setup."""
