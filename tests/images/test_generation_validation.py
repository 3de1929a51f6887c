"""generation_params_validate: every rule of the issue, tested on the function directly."""

from __future__ import annotations

import pytest

from core.errors import InvalidRequest
from images.validation import ImageParams, generation_params_validate

pytestmark = pytest.mark.django_db


def refused(body, model) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        generation_params_validate(body=body, image_model=model)
    assert info.value.status == 400
    assert info.value.type == "invalid_request_error"
    return info.value


def test_it_accepts_a_minimal_body_with_the_defaults(alpha_model):
    params = generation_params_validate(
        body={"model": "alpha-image-2", "prompt": "a fox"}, image_model=alpha_model
    )
    assert params == ImageParams(
        prompt="a fox", n=1, size=None, response_format="b64_json", output_format=None, options={}
    )


def test_it_keeps_every_valid_spec_field(alpha_model):
    params = generation_params_validate(
        body={
            "model": "alpha-image-2",
            "prompt": "a fox",
            "n": 4,
            "size": "1024x1536",
            "quality": "high",
            "background": "opaque",
            "output_format": "webp",
            "output_compression": 80,
            "moderation": "low",
            "response_format": "url",
            "user": "end-user-42",
            "stream": False,
        },
        image_model=alpha_model,
    )
    assert (params.n, params.size, params.output_format, params.response_format) == (
        4,
        "1024x1536",
        "webp",
        "url",
    )
    assert params.options == {
        "quality": "high",
        "background": "opaque",
        "output_compression": 80,
        "moderation": "low",
        "user": "end-user-42",
    }


def test_it_drops_fields_outside_the_spec(alpha_model):
    params = generation_params_validate(
        body={"prompt": "a fox", "model": "alpha-image-2", "seed": 7, "api_key": "x", "extra": {"a": 1}},
        image_model=alpha_model,
    )
    assert params.options == {}
    assert "seed" not in repr(params) and "api_key" not in repr(params)


@pytest.mark.parametrize("body", [[], "prompt", 3, None, True])
def test_it_refuses_a_body_that_is_not_an_object(alpha_model, body):
    error = refused(body, alpha_model)
    assert error.code == "invalid_body"
    assert "JSON object" in error.message


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({}, "missing_required_parameter"),
        ({"prompt": None}, "missing_required_parameter"),
        ({"prompt": ""}, "invalid_value"),
        ({"prompt": "   \n"}, "invalid_value"),
        ({"prompt": 12}, "invalid_type"),
        ({"prompt": ["a"]}, "invalid_type"),
    ],
)
def test_it_requires_prompt_as_a_non_empty_string(alpha_model, body, code):
    error = refused(body, alpha_model)
    assert (error.param, error.code) == ("prompt", code)
    assert "`prompt`" in error.message


def test_it_refuses_a_prompt_over_the_configured_length(alpha_model, settings):
    settings.GATEWAY_MAX_PROMPT_CHARS = 10
    generation_params_validate(body={"prompt": "x" * 10}, image_model=alpha_model)
    error = refused({"prompt": "x" * 11}, alpha_model)
    assert (error.param, error.code) == ("prompt", "string_above_max_length")
    assert "at most 10" in error.message


def test_the_default_prompt_limit_is_32000_characters(alpha_model):
    generation_params_validate(body={"prompt": "x" * 32_000}, image_model=alpha_model)
    assert refused({"prompt": "x" * 32_001}, alpha_model).param == "prompt"


@pytest.mark.parametrize(
    ("n", "code"),
    [
        ("2", "invalid_type"),
        (2.5, "invalid_type"),
        (2.0, "invalid_type"),
        (True, "invalid_type"),
        (0, "invalid_value"),
        (-1, "invalid_value"),
    ],
)
def test_it_refuses_n_that_is_not_a_positive_json_integer(alpha_model, n, code):
    error = refused({"prompt": "p", "n": n}, alpha_model)
    assert (error.param, error.code) == ("n", code)


def test_it_refuses_n_as_a_string_saying_what_was_sent(alpha_model):
    error = refused({"prompt": "p", "n": "2"}, alpha_model)
    assert "`n` must be an integer" in error.message and "string" in error.message


def test_it_refuses_n_above_the_models_max_n(alpha_model):
    assert generation_params_validate(body={"prompt": "p", "n": 4}, image_model=alpha_model).n == 4
    error = refused({"prompt": "p", "n": 5}, alpha_model)
    assert (error.param, error.code) == ("n", "invalid_value")
    assert "at most 4" in error.message


@pytest.mark.parametrize("size", ["1024x1024", "1024x1536", "auto"])
def test_it_accepts_the_models_sizes(alpha_model, size):
    assert (
        generation_params_validate(body={"prompt": "p", "size": size}, image_model=alpha_model).size == size
    )


@pytest.mark.parametrize("size", ["1024", "1024X1024", "x1024", "1024x", "0x0", "big", "1024 x 1024"])
def test_it_refuses_a_size_not_shaped_width_x_height(alpha_model, size):
    error = refused({"prompt": "p", "size": size}, alpha_model)
    assert (error.param, error.code) == ("size", "invalid_value")
    assert "<width>x<height>" in error.message and "1024x1536" in error.message


def test_it_refuses_a_well_formed_size_the_model_does_not_offer(alpha_model):
    error = refused({"prompt": "p", "size": "1792x1024"}, alpha_model)
    assert (error.param, error.code) == ("size", "invalid_value")
    assert "allowed: 1024x1024, 1024x1536, 64x64, auto" in error.message


def test_it_refuses_auto_where_the_model_does_not_list_it(streaming_model):
    error = refused({"prompt": "p", "size": "auto"}, streaming_model)
    assert error.param == "size"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("size", "1024x1024"),
        ("quality", "high"),
        ("style", "vivid"),
        ("background", "opaque"),
        ("output_format", "png"),
        ("output_compression", 50),
        ("partial_images", 1),
    ],
)
def test_it_refuses_a_field_the_model_does_not_support_naming_it(plain_model, field, value):
    error = refused({"prompt": "p", field: value}, plain_model)
    assert (error.param, error.code) == (field, "unsupported_parameter")
    assert f"`{field}`" in error.message and "plain-image" in error.message


@pytest.mark.parametrize(
    ("field", "value", "allowed"),
    [
        ("quality", "hd", "low, high"),
        ("background", "green", "transparent, opaque"),
        ("output_format", "gif", "png, jpeg, webp"),
        ("response_format", "file", "url, b64_json"),
        ("moderation", "strict", "auto, low"),
    ],
)
def test_it_refuses_a_value_outside_the_allowed_ones_listing_them(alpha_model, field, value, allowed):
    error = refused({"prompt": "p", field: value}, alpha_model)
    assert (error.param, error.code) == (field, "invalid_value")
    assert allowed in error.message


@pytest.mark.parametrize(
    "field", ["quality", "background", "output_format", "response_format", "moderation", "user"]
)
def test_it_refuses_a_string_field_of_another_type(alpha_model, field):
    error = refused({"prompt": "p", field: 1}, alpha_model)
    assert (error.param, error.code) == (field, "invalid_type")


def test_response_format_defaults_to_the_models_default(alpha_model, plain_model):
    assert (
        generation_params_validate(body={"prompt": "p"}, image_model=alpha_model).response_format
        == "b64_json"
    )
    assert generation_params_validate(body={"prompt": "p"}, image_model=plain_model).response_format == "url"


@pytest.mark.parametrize("value", [-1, 101, "80", 80.5, True])
def test_it_refuses_output_compression_outside_the_range_or_not_an_integer(alpha_model, value):
    error = refused({"prompt": "p", "output_format": "jpeg", "output_compression": value}, alpha_model)
    assert error.param == "output_compression"


@pytest.mark.parametrize("output_format", [None, "png"])
def test_it_refuses_output_compression_without_a_compressible_format(alpha_model, output_format):
    body = {"prompt": "p", "output_compression": 50}
    if output_format:
        body["output_format"] = output_format
    error = refused(body, alpha_model)
    assert (error.param, error.code) == ("output_compression", "invalid_value")
    assert "jpeg or webp" in error.message


def test_it_refuses_a_transparent_background_with_jpeg(alpha_model):
    error = refused({"prompt": "p", "background": "transparent", "output_format": "jpeg"}, alpha_model)
    assert error.param == "background"


def test_it_refuses_a_user_over_256_characters(alpha_model):
    generation_params_validate(body={"prompt": "p", "user": "u" * 256}, image_model=alpha_model)
    error = refused({"prompt": "p", "user": "u" * 257}, alpha_model)
    assert (error.param, error.code) == ("user", "invalid_value")


def test_it_refuses_input_fidelity_on_generation(alpha_model):
    error = refused({"prompt": "p", "input_fidelity": "high"}, alpha_model)
    assert (error.param, error.code) == ("input_fidelity", "unsupported_parameter")


def test_it_refuses_stream_true_where_the_model_does_not_stream(alpha_model):
    error = refused({"prompt": "p", "stream": True}, alpha_model)
    assert (error.param, error.code) == ("stream", "unsupported_parameter")
    assert (
        generation_params_validate(body={"prompt": "p", "stream": False}, image_model=alpha_model).options
        == {}
    )


def test_it_accepts_stream_and_partial_images_where_the_model_streams(streaming_model):
    params = generation_params_validate(
        body={"prompt": "p", "stream": True, "partial_images": 3, "style": "vivid"},
        image_model=streaming_model,
    )
    assert params.options == {"stream": True, "partial_images": 3, "style": "vivid"}


@pytest.mark.parametrize("value", [4, -1, "2", True, 1.5])
def test_it_refuses_partial_images_outside_0_to_3(streaming_model, value):
    assert refused({"prompt": "p", "partial_images": value}, streaming_model).param == "partial_images"


@pytest.mark.parametrize("value", ["true", 1, "yes"])
def test_it_refuses_stream_that_is_not_a_boolean(streaming_model, value):
    error = refused({"prompt": "p", "stream": value}, streaming_model)
    assert (error.param, error.code) == ("stream", "invalid_type")


def test_it_treats_json_null_as_absent_for_optional_fields(alpha_model):
    params = generation_params_validate(
        body={"prompt": "p", "n": None, "size": None, "quality": None, "response_format": None},
        image_model=alpha_model,
    )
    assert (params.n, params.size, params.response_format, params.options) == (1, None, "b64_json", {})
