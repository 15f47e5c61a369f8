from __future__ import annotations

import lineage

REQUIRED = {
    "IdKind",
    "mint_id",
    "id_kind",
    "id_timestamp_ms",
    "is_valid_id",
    "canonical_json",
    "sha256_hex",
    "digest_root",
    "digest_extend",
    "prefix_digest",
    "digest_chain",
    "common_prefix_length",
    "SessionSource",
    "ParentLineage",
    "ResponseLineage",
    "resolve_lineage",
    "ExecutionFingerprint",
    "FingerprintChange",
    "mint_cache_salt",
    "is_valid_cache_salt",
}


def test_exports() -> None:
    assert set(lineage.__all__) >= REQUIRED
    assert len(set(lineage.__all__)) == len(lineage.__all__)
    for name in lineage.__all__:
        assert getattr(lineage, name) is not None
