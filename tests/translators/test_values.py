"""translators.values: the readers every translator shares."""

from __future__ import annotations

import pytest

from translators.values import data_url


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("data:image/png;base64,iVBOR", ("image/png", "iVBOR")),
        ("data:application/pdf;name=a.pdf;base64,JVBER", ("application/pdf", "JVBER")),
        ("data:;base64,AAAA", ("", "AAAA")),
        ("data:image/png,iVBOR", None),
        ("data:image/png;base64,", None),
        ("https://example.com/a.png", None),
        (None, None),
        ({"url": "data:image/png;base64,iVBOR"}, None),
    ],
)
def test_a_data_url_is_read_only_when_it_holds_base64_data(value, parsed):
    assert data_url(value) == parsed
