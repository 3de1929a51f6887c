"""API key format, checksum and keyed hash.

A key is `sk-` + 43 base62 characters (32 random bytes, 256 bits) + a 6-character base62 CRC32 of
them. The checksum lets a mistyped or malformed key be refused without a database lookup. Keys are
stored as HMAC-SHA256(pepper, key): a stolen table gives nobody a usable key, and without the pepper
it cannot even be brute-forced offline.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import zlib

from django.conf import settings

KEY_PREFIX = "sk-"
_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_BODY_LEN = 43  # 62**43 > 2**256
_CHECKSUM_LEN = 6  # 62**6 > 2**32
KEY_PATTERN = re.compile(rf"sk-[0-9A-Za-z]{{{_BODY_LEN + _CHECKSUM_LEN}}}")
DISPLAY_PREFIX_LEN = len(KEY_PREFIX) + 8


def _base62(number: int, length: int) -> str:
    chars = []
    for _ in range(length):
        number, rem = divmod(number, 62)
        chars.append(_ALPHABET[rem])
    return "".join(reversed(chars))


def _checksum(body: str) -> str:
    return _base62(zlib.crc32(body.encode("ascii")), _CHECKSUM_LEN)


def api_key_generate() -> str:
    body = _base62(int.from_bytes(secrets.token_bytes(32), "big"), _BODY_LEN)
    return f"{KEY_PREFIX}{body}{_checksum(body)}"


def api_key_well_formed(key: str) -> bool:
    """True when the key has the right shape and its checksum matches (no database needed)."""
    if not KEY_PATTERN.fullmatch(key):
        return False
    body, check = key[len(KEY_PREFIX) : -_CHECKSUM_LEN], key[-_CHECKSUM_LEN:]
    return hmac.compare_digest(_checksum(body), check)


def api_key_hash(key: str) -> str:
    return hmac.new(settings.GATEWAY_KEY_PEPPER.encode(), key.encode(), hashlib.sha256).hexdigest()


def api_key_display_prefix(key: str) -> str:
    return key[:DISPLAY_PREFIX_LEN]
