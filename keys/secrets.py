"""Credential formats, checksums and stored digests.

A manual API key is `sk-` + 43 base62 characters (32 random bytes, 256 bits) + a 6-character base62
CRC32 of them. The checksum lets a mistyped or malformed key be refused without a database lookup.
Keys are stored as HMAC-SHA256(pepper, key): a stolen table gives nobody a usable key, and without the
pepper it cannot even be brute-forced offline.

OAuth access tokens are `sk_oauth_` + the same body and checksum; refresh tokens are `rt_oauth_` + the
same, so a refresh token sent as a bearer credential is refused by its shape. django-oauth-toolkit
stores only their SHA-256 (`token_checksum`; settings COMPLIANT_BCP_RFC9700_TOKEN_STORAGE), which is
safe without a pepper because the tokens carry 256 random bits.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import zlib
from typing import Any

from django.conf import settings

KEY_PREFIX = "sk-"
OAUTH_ACCESS_TOKEN_PREFIX = "sk_oauth_"  # noqa: S105 - a format prefix, not a secret
OAUTH_REFRESH_TOKEN_PREFIX = "rt_oauth_"  # noqa: S105 - a format prefix, not a secret
_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_BODY_LEN = 43  # 62**43 > 2**256
_CHECKSUM_LEN = 6  # 62**6 > 2**32
KEY_PATTERN = re.compile(rf"sk-[0-9A-Za-z]{{{_BODY_LEN + _CHECKSUM_LEN}}}")
OAUTH_ACCESS_TOKEN_PATTERN = re.compile(rf"sk_oauth_[0-9A-Za-z]{{{_BODY_LEN + _CHECKSUM_LEN}}}")
DISPLAY_PREFIX_LEN = len(KEY_PREFIX) + 8


def _base62(number: int, length: int) -> str:
    chars = []
    for _ in range(length):
        number, rem = divmod(number, 62)
        chars.append(_ALPHABET[rem])
    return "".join(reversed(chars))


def _checksum(body: str) -> str:
    return _base62(zlib.crc32(body.encode("ascii")), _CHECKSUM_LEN)


def _random_credential(prefix: str) -> str:
    body = _base62(int.from_bytes(secrets.token_bytes(32), "big"), _BODY_LEN)
    return f"{prefix}{body}{_checksum(body)}"


def _checksum_matches(value: str, *, prefix: str, pattern: re.Pattern[str]) -> bool:
    if not pattern.fullmatch(value):
        return False
    body, check = value[len(prefix) : -_CHECKSUM_LEN], value[-_CHECKSUM_LEN:]
    return hmac.compare_digest(_checksum(body), check)


def api_key_generate() -> str:
    return _random_credential(KEY_PREFIX)


def api_key_well_formed(key: str) -> bool:
    """True when the key has the right shape and its checksum matches (no database needed)."""
    return _checksum_matches(key, prefix=KEY_PREFIX, pattern=KEY_PATTERN)


def api_key_hash(key: str) -> str:
    return hmac.new(settings.GATEWAY_KEY_PEPPER.encode(), key.encode(), hashlib.sha256).hexdigest()


def api_key_display_prefix(key: str) -> str:
    return key[:DISPLAY_PREFIX_LEN]


def oauth_access_token_generate(request: Any = None, refresh_token: bool = False) -> str:
    """django-oauth-toolkit's ACCESS_TOKEN_GENERATOR (oauthlib calls it with the request)."""
    return _random_credential(OAUTH_ACCESS_TOKEN_PREFIX)


def oauth_refresh_token_generate(request: Any = None, refresh_token: bool = True) -> str:
    """django-oauth-toolkit's REFRESH_TOKEN_GENERATOR."""
    return _random_credential(OAUTH_REFRESH_TOKEN_PREFIX)


def oauth_access_token_well_formed(token: str) -> bool:
    """True when the token has the `sk_oauth_` shape and its checksum matches (no database needed)."""
    return _checksum_matches(token, prefix=OAUTH_ACCESS_TOKEN_PREFIX, pattern=OAUTH_ACCESS_TOKEN_PATTERN)


def oauth_token_checksum(token: str) -> str:
    """The digest django-oauth-toolkit stores and looks tokens up by (its `token_checksum`)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()
