"""Explicit input limits (documented in the README; each one has a test)."""

MAX_INPUT_ITEMS = 10_000
MAX_TOOLS = 512
MAX_METADATA_PAIRS = 16
MAX_METADATA_KEY_LENGTH = 64
MAX_METADATA_VALUE_LENGTH = 512
MAX_ID_LENGTH = 128
MAX_MODEL_LENGTH = 200
MAX_PROMPT_CACHE_KEY_LENGTH = 1024
MAX_ITEM_TYPE_LENGTH = 64
MAX_INCLUDE_ENTRIES = 32
MAX_LIST_LIMIT = 100
# OpenAI accepts at most this many items per Conversations API call (create or append).
MAX_CONVERSATION_ITEMS_PER_CALL = 20
# Idempotency-Key header length (it is a primary-key column).
MAX_IDEMPOTENCY_KEY_LENGTH = 255
