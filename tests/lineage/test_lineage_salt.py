from __future__ import annotations

import hashlib
import hmac

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from lineage.salt import CACHE_SALT_MAX_LENGTH, is_valid_cache_salt, mint_cache_salt

secrets_ = st.binary(min_size=1, max_size=16)
tenants = st.text(min_size=1, max_size=10)
epochs = st.integers(min_value=0, max_value=2**70)


def _framed(*fields: bytes) -> bytes:
    return b"".join(len(f).to_bytes(8, "big") + f for f in fields)


def test_layout_is_the_documented_one() -> None:
    # A silent change here would rotate every tenant's salt at deploy time
    # and drop the whole fleet's prefix cache.
    message = _framed(b"agentic-api/cache-salt/v1", b"ten_1", b"3")
    expected = hmac.new(b"secret", message, hashlib.sha256).hexdigest()
    assert mint_cache_salt(b"secret", "ten_1", 3) == expected
    assert expected == "4ada90c2427d19882c05fdaae886e321448f11e552aaa2e2f6e5f5a123aaabfa"


def test_tenant_and_epoch_are_framed_apart() -> None:
    assert mint_cache_salt(b"k", "a1", 1) != mint_cache_salt(b"k", "a", 11)


@pytest.mark.parametrize(
    ("secret", "tenant", "epoch", "message"),
    [
        (b"", "t", 0, "secret"),
        (b"k", "", 0, "tenant"),
        (b"k", "t", -1, "epoch"),
        (b"k", "t", True, "epoch"),
    ],
)
def test_bad_arguments(secret: bytes, tenant: str, epoch: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        mint_cache_salt(secret, tenant, epoch)


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("a", True),
        ("x" * CACHE_SALT_MAX_LENGTH, True),
        ("sel-de_ü.:+=", True),
        ("", False),
        ("x" * (CACHE_SALT_MAX_LENGTH + 1), False),
        ("a@b", False),
        ("a/b", False),
        ("a\\b", False),
        ("a\x00b", False),
    ],
)
def test_vllm_rules(value: str, valid: bool) -> None:
    assert is_valid_cache_salt(value) is valid


@given(secrets_, tenants, epochs)
def test_salts_are_stable_lowercase_hex_and_valid(secret: bytes, tenant: str, epoch: int) -> None:
    salt = mint_cache_salt(secret, tenant, epoch)
    assert salt == mint_cache_salt(secret, tenant, epoch)
    assert len(salt) == 64
    assert salt == salt.lower()
    int(salt, 16)
    assert is_valid_cache_salt(salt)


@given(secrets_, tenants, tenants, epochs)
def test_tenants_never_share_a_salt(secret: bytes, a: str, b: str, epoch: int) -> None:
    assume(a != b)
    assert mint_cache_salt(secret, a, epoch) != mint_cache_salt(secret, b, epoch)


@given(secrets_, tenants, epochs, epochs)
def test_epochs_rotate_the_salt(secret: bytes, tenant: str, a: int, b: int) -> None:
    assume(a != b)
    assert mint_cache_salt(secret, tenant, a) != mint_cache_salt(secret, tenant, b)


@given(secrets_, secrets_, tenants, epochs)
def test_the_secret_keys_the_salt(a: bytes, b: bytes, tenant: str, epoch: int) -> None:
    # HMAC pads short keys with zeros, so only keys that differ after
    # padding are distinct keys.
    assume(a.rstrip(b"\0") != b.rstrip(b"\0"))
    assert mint_cache_salt(a, tenant, epoch) != mint_cache_salt(b, tenant, epoch)
