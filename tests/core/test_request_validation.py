"""core.validation: a request model's refusal becomes the API's error in one place, the same for every
body (status, type, code, param, a message naming the field)."""

from __future__ import annotations

import pytest
from pydantic import Field, ValidationInfo, field_validator

from core.errors import InvalidRequest
from core.validation import RequestBody, body_validate, context_of, refusal


class Part(RequestBody):
    role: str


class Body(RequestBody):
    name: str = Field(description="the thing's name")
    count: int | None = Field(None, ge=1, le=10)
    label: str | None = Field(None, max_length=5)
    flag: bool = False
    parts: list[Part] = []
    slug: str | None = Field(None, min_length=1, pattern=r"^[a-z]*$")
    tags: list[str] = Field(default_factory=list, max_length=2)

    @field_validator("count")
    @classmethod
    def _within_the_contexts_maximum(cls, count: int, info: ValidationInfo) -> int:
        if count > context_of(info)["maximum"]:
            raise refusal("over_maximum", f"`count` {count} is over {{maximum}} and {{param}}.")
        return count


def refused(value: object, maximum: int = 10) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        body_validate(Body, value, context={"maximum": maximum})
    assert (info.value.status, info.value.type) == (400, "invalid_request_error")
    return info.value


def test_a_valid_body_is_the_model_with_unknown_fields_ignored_and_null_as_absent():
    body = body_validate(Body, {"name": "a", "count": None, "extra": {"x": 1}}, context={"maximum": 10})

    assert (body.name, body.count, body.flag) == ("a", None, False)
    assert not hasattr(body, "extra")


@pytest.mark.parametrize("value", [{}, {"name": None}])
def test_a_missing_field_is_missing_required_parameter_with_its_description(value):
    error = refused(value)

    assert (error.param, error.code) == ("name", "missing_required_parameter")
    assert error.message == "`name` is required: the thing's name."


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"name": 5}, "`name` must be a string; got number 5."),
        ({"name": "a", "count": "2"}, "`count` must be an integer; got string '2'."),
        ({"name": "a", "count": True}, "`count` must be an integer; got boolean True."),
        ({"name": "a", "flag": "true"}, "`flag` must be a boolean (true or false); got string 'true'."),
        ({"name": ["a"]}, "`name` must be a string; got array."),
    ],
)
def test_a_wrong_json_type_is_invalid_type_saying_what_was_sent(value, expected):
    error = refused(value)

    assert (error.code, error.message) == ("invalid_type", expected)


def test_a_long_value_is_cut_short_in_the_message():
    error = refused({"name": "a", "count": "9" * 500})

    assert error.message.endswith("….") and len(error.message) < 120


def test_the_first_field_in_declaration_order_is_answered():
    assert refused({"count": 0, "name": 7}).param == "name"


@pytest.mark.parametrize(
    ("value", "param", "expected"),
    [
        ({"name": "a", "count": 0}, "count", "`count` must be at least 1; got 0."),
        ({"name": "a", "count": 11}, "count", "`count` must be at most 10; got 11."),
        ({"name": "a", "label": "abcdef"}, "label", "`label` must be at most 5 characters; got 6."),
        ({"name": "a", "slug": ""}, "slug", "`slug` must not be empty."),
        ({"name": "a", "slug": "A"}, "slug", "`slug` must match ^[a-z]*$; got 'A'."),
        ({"name": "a", "tags": ["x", "y", "z"]}, "tags", "`tags` may hold at most 2 items."),
    ],
)
def test_a_value_out_of_a_declared_bound_is_invalid_value(value, param, expected):
    error = refused(value)

    assert (error.param, error.code, error.message) == (param, "invalid_value", expected)


def test_a_validators_refusal_keeps_its_code_and_its_words_braces_included():
    error = refused({"name": "a", "count": 5}, maximum=4)

    assert (error.param, error.code) == ("count", "over_maximum")
    assert error.message == "`count` 5 is over {maximum} and {param}."


def test_a_nested_field_is_named_as_a_path():
    error = refused({"name": "a", "parts": [{"role": "x"}, {"role": 3}]})

    assert (error.param, error.code) == ("parts[1].role", "invalid_type")
    assert error.message.startswith("`parts[1].role` must be a string")


def test_a_body_that_is_not_an_object_is_refused_without_a_param():
    error = refused([1, 2])

    assert (error.param, error.code) == (None, "invalid_type")
    assert "must be an object" in error.message
