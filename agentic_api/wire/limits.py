"""Explicit input limits (documented in the README; each one has a test)."""

MAX_INPUT_ITEMS = 10_000
MAX_TOOLS = 512
MAX_METADATA_PAIRS = 16
MAX_METADATA_KEY_LENGTH = 64
MAX_METADATA_VALUE_LENGTH = 512
# Every id column of both schemas is VARCHAR(64) (storage/models.py: ID); a test holds
# the two together. Client-chosen item ids longer than this would only fail at commit.
MAX_ID_LENGTH = 64
MAX_MODEL_LENGTH = 200
MAX_PROMPT_CACHE_KEY_LENGTH = 1024
# openai 3.63 documents at most 128 characters for ``safety_identifier`` (responses,
# compaction, conversations).
MAX_SAFETY_IDENTIFIER_LENGTH = 128
MAX_ITEM_TYPE_LENGTH = 64
MAX_INCLUDE_ENTRIES = 32
MAX_LIST_LIMIT = 100
# OpenAI accepts at most this many items per Conversations API call (create or append).
MAX_CONVERSATION_ITEMS_PER_CALL = 20
# Idempotency-Key header length (it is a primary-key column).
MAX_IDEMPOTENCY_KEY_LENGTH = 255
# Deepest nesting of objects and arrays accepted in a JSON body (the body itself is level
# 1), checked at parse time. Stored documents nest the client's values a few levels
# deeper, and encoders and validators recurse per level: well within their limits.
MAX_JSON_DEPTH = 64
# Largest integer accepted anywhere (body fields, query parameters): what a PostgreSQL
# INTEGER column (and the upstream's token counters) can hold.
MAX_INTEGER = 2**31 - 1
# Latest time a query parameter in unix seconds may name (9999-12-31T23:59:59Z): what
# datetime, and so every timestamp column, can hold.
MAX_UNIX_SECONDS = 253_402_300_799
