"""Validation of a model's capability lists, shared by the admin (model clean) and the config loader."""

from __future__ import annotations

import re
from typing import Any

SIZE_PATTERN = re.compile(r"[1-9][0-9]{0,4}x[1-9][0-9]{0,4}")
KNOWN_OUTPUT_FORMATS = ("png", "jpeg", "webp")
# Formats whose encoders take a compression level.
COMPRESSIBLE_FORMATS = ("jpeg", "webp")


def _string_list(
    name: str, value: Any, errors: dict[str, str], *, allowed: tuple[str, ...] | None = None
) -> None:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        errors[name] = "must be a list of non-empty strings"
        return
    if len(set(value)) != len(value):
        errors[name] = "has duplicate values"
        return
    if allowed is not None:
        unknown = [v for v in value if v not in allowed]
        if unknown:
            errors[name] = f"unknown values {unknown}; allowed: {list(allowed)}"


def validate_capabilities(
    *,
    sizes: Any,
    qualities: Any,
    styles: Any,
    backgrounds: Any,
    output_formats: Any,
    output_compression: tuple[Any, Any] | None,
) -> dict[str, str]:
    """Return {field: reason} for every invalid capability; empty when all are valid."""
    errors: dict[str, str] = {}
    _string_list("sizes", sizes, errors)
    if "sizes" not in errors:
        bad = [s for s in sizes if s != "auto" and not SIZE_PATTERN.fullmatch(s)]
        if bad:
            errors["sizes"] = f"sizes must be <width>x<height> or auto, got {bad}"
    _string_list("qualities", qualities, errors)
    _string_list("styles", styles, errors)
    _string_list("backgrounds", backgrounds, errors)
    _string_list("output_formats", output_formats, errors, allowed=KNOWN_OUTPUT_FORMATS)
    low, high = output_compression if output_compression else (None, None)
    if (low is None) != (high is None):
        errors["output_compression"] = "give both ends of the range or neither"
    elif low is not None:
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (low, high)):
            errors["output_compression"] = "the range ends must be whole numbers"
        elif not 0 <= low <= high <= 100:
            errors["output_compression"] = "the range must satisfy 0 <= min <= max <= 100"
    return errors
