"""The playground knows its model: the sizes, qualities, formats and number of images it offers are
the selected model's, server-rendered (`?model=`, "Choose model") and adapted by the page's script."""

from __future__ import annotations

import json
import re

import pytest

from billing.models import UsageRecord
from tests.factories import image_model_make


@pytest.fixture
def square_model(alpha_group, demo_upstream):
    """A second model of alice's group: one size, no quality or format choices, one image a call."""
    return image_model_make(
        model_id="square-image",
        group=alpha_group,
        upstreams=[demo_upstream],
        sizes=["512x512"],
        qualities=[],
        output_formats=[],
        max_n=1,
    )


def _options(html: str, field: str) -> list[str]:
    select = re.search(rf'<select name="{field}"[^>]*>(.*?)</select>', html, re.S).group(1)
    return re.findall(r'<option value="([^"]*)"', select)


def test_it_offers_the_first_models_choices_by_default(alice_client, alpha_model, square_model):
    html = alice_client.get("/console/playground/").content.decode()

    assert _options(html, "size") == ["", "1024x1024", "1024x1536", "64x64", "auto"]
    assert _options(html, "quality") == ["", "low", "high"]
    assert _options(html, "output_format") == ["", "png", "jpeg", "webp"]
    assert 'max="4"' in html


def test_it_offers_only_the_asked_for_models_choices(alice_client, alpha_model, square_model):
    response = alice_client.get(f"/console/playground/?model={square_model.pk}")

    html = response.content.decode()
    assert response.context["form"].selected_model == square_model
    assert re.search(rf'<option value="{square_model.pk}" selected>', html)
    assert _options(html, "size") == ["", "512x512"]
    assert _options(html, "quality") == [""]
    assert re.search(r'<div data-choice="quality" hidden>', html)
    assert 'max="1"' in html


def test_it_embeds_every_models_choices_for_the_script(alice_client, alpha_model, square_model):
    html = alice_client.get("/console/playground/").content.decode()

    embedded = json.loads(
        re.search(r'<script id="playground-models" type="application/json">(.*?)</script>', html).group(1)
    )
    assert embedded[str(square_model.pk)] == {
        "size": ["512x512"],
        "quality": [],
        "output_format": [],
        "max_n": 1,
    }
    assert embedded[str(alpha_model.pk)]["quality"] == ["low", "high"]


def test_choose_model_shows_its_choices_and_calls_nothing(alice_client, alice, alpha_model, square_model):
    response = alice_client.post(
        "/console/playground/", {"model": square_model.pk, "prompt": "a lighthouse", "choose": "1"}
    )

    assert response.status_code == 200
    html = response.content.decode()
    assert _options(html, "size") == ["", "512x512"]
    assert "a lighthouse</textarea>" in html
    assert not UsageRecord.objects.filter(account=alice).exists()


def test_it_refuses_a_size_the_selected_model_does_not_take(alice_client, alice, alpha_model, square_model):
    response = alice_client.post(
        "/console/playground/",
        {"model": square_model.pk, "prompt": "a lighthouse", "size": "1024x1024", "n": "1"},
    )

    assert response.status_code == 400
    assert b"Select a valid choice" in response.content
    assert not UsageRecord.objects.filter(account=alice).exists()


def test_it_refuses_more_images_than_the_selected_model_makes(alice_client, alice, alpha_model, square_model):
    response = alice_client.post(
        "/console/playground/", {"model": square_model.pk, "prompt": "a lighthouse", "n": "2"}
    )

    assert response.status_code == 400
    assert b"Ensure this value is less than or equal to 1" in response.content


def test_it_sends_the_chosen_quality_and_format(alice_client, alice, alpha_model):
    posted = alice_client.post(
        "/console/playground/",
        {
            "model": alpha_model.pk,
            "prompt": "a lighthouse",
            "n": "1",
            "quality": "high",
            "output_format": "jpeg",
        },
    )

    assert posted.status_code == 302
    html = alice_client.get(posted["Location"]).content.decode()
    assert '<img src="/files/images/' in html
    assert re.search(r'<option value="high" selected>', html)
