"""SQLite specifics: our two SQLAlchemy drivers and the connection settings."""
