"""Keys and owners as stored bytes: lone surrogates accepted (``surrogatepass``), and the long-key
mapping identical to the TypeScript package's (shared vectors in integrations/mastra/test)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import sql_lease
from sql_lease import LONG_KEY_HEAD_BYTES, LONG_KEY_MARKER, LeaseTypeError, map_long_key
from sql_lease._core.validate import MAX_NAME_BYTES, check_name

VECTORS = Path(__file__).parents[2] / "integrations" / "mastra" / "test" / "key-vectors.json"


def stored(key: str) -> bytes:
    return map_long_key(key).encode("utf-8", "surrogatepass")


@pytest.mark.parametrize(
    "vector", json.loads(VECTORS.read_text())["vectors"], ids=lambda v: repr(v["key"][:12])
)
def test_the_mapping_matches_the_shared_vectors(vector: dict[str, str]) -> None:
    assert stored(vector["key"]).hex() == vector["stored_hex"]


@pytest.mark.parametrize("key", ["k", "x" * 1024, "\u00e9" * 512, "lone\ud800", "\udc00" * 341])
def test_a_key_of_1024_bytes_or_fewer_is_its_own_stored_form(key: str) -> None:
    assert map_long_key(key) is key


@pytest.mark.parametrize("key", ["x" * 1025, "x" * 4000, "r\x00" + "\u4e2d" * 999, "\ud800" * 400])
def test_a_long_key_keeps_its_head_and_the_sha256_of_all_its_bytes(key: str) -> None:
    whole = key.encode("utf-8", "surrogatepass")
    mapped = stored(key)
    digest = hashlib.sha256(whole).hexdigest()
    assert len(mapped) <= MAX_NAME_BYTES
    assert mapped.endswith((LONG_KEY_MARKER + digest).encode())
    head = mapped[: -len(LONG_KEY_MARKER) - 64]
    assert whole.startswith(head) and LONG_KEY_HEAD_BYTES - 3 <= len(head) <= LONG_KEY_HEAD_BYTES
    assert map_long_key(map_long_key(key)) == map_long_key(key)  # the mapped form maps to itself


def test_long_keys_that_differ_anywhere_map_apart() -> None:
    base = "x" * 4000
    variants = [base, base + "y", base[:-1] + "y", "y" + base[1:], base[:3000], base + "\ud800"]
    assert len({map_long_key(k) for k in variants}) == len(variants)


def test_lone_surrogates_are_stored_as_their_three_byte_form() -> None:
    assert check_name("key", "a\ud800") == b"a\xed\xa0\x80"
    assert check_name("owner", "\udfff") == b"\xed\xbf\xbf"
    assert check_name("key", "a\ud800") != check_name("key", "a\ufffd")


def test_map_long_key_is_public_and_checks_its_argument() -> None:
    assert "map_long_key" in sql_lease.__all__
    with pytest.raises(LeaseTypeError):
        map_long_key(b"k")  # type: ignore[arg-type]
