"""The public tokenizer of a text model, where it has one: OpenAI's `o200k_base` (tiktoken) for the
OpenAI models that use it. Other models (Anthropic's, the demo's, OpenAI's older `cl100k_base`
models, other providers behind an `openai` upstream) have none here: their output is bounded by its
UTF-8 bytes instead (chat/output_count.py).

tiktoken downloads an encoding's file on first use, which a gateway without Internet access cannot.
The file ships in `chat/tiktoken/`, named as tiktoken's cache names it (the SHA-1 of its address);
`TIKTOKEN_CACHE_DIR` points there unless the environment sets it, and tiktoken checks the file's
SHA-256 before using it. The encoding is loaded once per process, when first needed (a fraction of a
second, some 80 MB), and only for a stream whose caller left before its final event.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path

logger = logging.getLogger("gateway.text")

ENCODINGS_DIR = Path(__file__).resolve().parent / "tiktoken"

# OpenAI models whose tokenizer is o200k_base (tiktoken's own model table, by prefix): GPT-4o, 4.1,
# 4.5 and 5, the o-series reasoning models, their ChatGPT and Codex variants, and gpt-oss.
_O200K_MODELS = re.compile(r"(?:gpt-4o|gpt-4\.1|gpt-4\.5|gpt-5|o1|o3|o4|chatgpt-4o|codex-|gpt-oss)", re.I)


def output_encoder(*, upstream_kind: str, upstream_model: str) -> Callable[[str], Sequence[int]] | None:
    """How to count a model's output tokens exactly: the encoding's `encode_ordinary`, for an OpenAI
    model with the o200k tokenizer on an `openai` upstream; None for every other model (and if the
    encoding cannot be loaded, which is logged)."""
    if upstream_kind != "openai" or _O200K_MODELS.match(upstream_model) is None:
        return None
    encoding = _o200k()
    return None if encoding is None else encoding.encode_ordinary


def o200k_encoder() -> Callable[[str], Sequence[int]] | None:
    """o200k_base's `encode_ordinary`, for counting a request's tokens (chat/token_count.py); None if
    the encoding cannot be loaded (logged)."""
    encoding = _o200k()
    return None if encoding is None else encoding.encode_ordinary


@functools.cache
def _o200k():  # -> tiktoken.Encoding | None
    import tiktoken

    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(ENCODINGS_DIR))
    try:
        return tiktoken.get_encoding("o200k_base")
    except Exception:
        logger.exception("could not load the o200k_base encoding; output is bounded by its bytes instead")
        return None
