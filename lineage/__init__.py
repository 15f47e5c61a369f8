"""Identities, content digests, fingerprints and salts for agentic-api.

Pure functions over plain values: no I/O and nothing imported from the
server, so storage and the turn pipeline can share one definition of each.
"""

from lineage.canonical import canonical_json, sha256_hex
from lineage.digest import (
    DIGEST_HEX_LENGTH,
    common_prefix_length,
    digest_chain,
    digest_extend,
    digest_root,
    extend_digest,
    is_valid_digest,
    prefix_digest,
)
from lineage.fingerprint import ExecutionFingerprint, FingerprintChange
from lineage.ids import (
    ID_HEX_LENGTH,
    IdKind,
    IdMinter,
    id_kind,
    id_timestamp_ms,
    is_valid_id,
    mint_id,
)
from lineage.lineage import (
    CONTENT_SESSION_ITEMS,
    ParentLineage,
    ResponseLineage,
    SessionSource,
    resolve_lineage,
    resolve_stateless_session,
)
from lineage.salt import CACHE_SALT_MAX_LENGTH, is_valid_cache_salt, mint_cache_salt

__all__ = [
    "CACHE_SALT_MAX_LENGTH",
    "CONTENT_SESSION_ITEMS",
    "DIGEST_HEX_LENGTH",
    "ID_HEX_LENGTH",
    "ExecutionFingerprint",
    "FingerprintChange",
    "IdKind",
    "IdMinter",
    "ParentLineage",
    "ResponseLineage",
    "SessionSource",
    "canonical_json",
    "common_prefix_length",
    "digest_chain",
    "digest_extend",
    "digest_root",
    "extend_digest",
    "id_kind",
    "id_timestamp_ms",
    "is_valid_cache_salt",
    "is_valid_digest",
    "is_valid_id",
    "mint_cache_salt",
    "mint_id",
    "prefix_digest",
    "resolve_lineage",
    "resolve_stateless_session",
    "sha256_hex",
]
