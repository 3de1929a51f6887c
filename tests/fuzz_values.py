"""What the body fuzz tests draw: any JSON value, leaning on the strings a validator or a request
walker gives a meaning to (so that the fuzz reaches their branches) and on text that breaks naive
code (unpaired surrogates, NUL, a line separator, 40 digits)."""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

ODD_STRINGS = ["\udfff", "\ud800x", "a\x00b", "\u2028", "", " ", "é", "🙂", "9" * 40]


def fuzz_settings(*, share: int = 1) -> settings:
    """FUZZ_EXAMPLES examples (60 by default; more for a longer search), divided by `share`."""
    return settings(
        max_examples=int(os.environ.get("FUZZ_EXAMPLES", "60")) // share,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


def texts(meaningful: list[str]) -> st.SearchStrategy[str]:
    return st.sampled_from(meaningful + ODD_STRINGS) | st.text(max_size=10)


def json_values(keys_and_strings: st.SearchStrategy[str], *, max_leaves: int) -> st.SearchStrategy[Any]:
    """Any JSON value: nulls, booleans, integers up to 2^70, finite floats, the given strings, and
    lists and objects of them (keys from the same strings)."""
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(min_value=-(2**70), max_value=2**70)
        | st.floats(allow_nan=False, allow_infinity=False)
        | keys_and_strings
    )
    return st.recursive(
        scalars,
        lambda children: (
            st.lists(children, max_size=4) | st.dictionaries(keys_and_strings, children, max_size=4)
        ),
        max_leaves=max_leaves,
    )


def form_encoded(pairs: Iterable[tuple[str, str]]) -> str:
    """A form body or query written by hand from any text: an unpaired surrogate goes as its bytes."""
    return "&".join(
        f"{quote(name.encode('utf-8', 'surrogatepass'))}={quote(value.encode('utf-8', 'surrogatepass'))}"
        for name, value in pairs
    )


def json_places(value: Any, *, added: str, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON value, as paths of keys and indexes: the value itself, each item and key
    below it, and in each object the key `added` (new there, or the one it has)."""
    found = [at]
    if isinstance(value, dict):
        found.append((*at, added))
        for key, item in value.items():
            found.extend(json_places(item, added=added, at=(*at, key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found.extend(json_places(item, added=added, at=(*at, index)))
    return found


def json_replaced(document: Any, at: tuple[Any, ...], value: Any) -> Any:
    """A copy of `document` with `value` at the place `at` (from json_places)."""
    if not at:
        return value
    document = copy.deepcopy(document)
    holder = document
    for step in at[:-1]:
        holder = holder[step]
    holder[at[-1]] = value
    return document
