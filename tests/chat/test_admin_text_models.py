"""The text models' admin: the service's rules on the add and change forms, prices as they read."""

from decimal import Decimal

import pytest
from django.urls import reverse

from chat.models import TextModel
from images.models import ImageModel
from tests.factories import image_model_make, text_model_make

pytestmark = pytest.mark.django_db

ADD = reverse("admin:chat_textmodel_add")


def form(group, upstreams, **overrides) -> dict:
    return {
        "model_id": "demo-chat",
        "group": group.pk,
        "upstream_model": "",
        "upstreams": [upstream.pk for upstream in upstreams],
        "input_price": "2.00",
        "output_price": "0.000024",
        "cached_input_price": "",
        "cache_write_price": "3.75",
        "max_output_tokens": "1024",
        "sticky_seconds": "3600",
        "enabled": "on",
        **overrides,
    }


def test_it_adds_a_text_model(staff_client, chat_group, demo_upstream):
    response = staff_client.post(ADD, form(chat_group, [demo_upstream]))

    assert response.status_code == 302, response.content.decode()[:2000]
    model = TextModel.objects.get(model_id="demo-chat")
    assert (model.group, model.output_price, model.cached_input_price) == (
        chat_group,
        Decimal("0.000024"),
        None,
    )
    assert list(model.upstreams.all()) == [demo_upstream]


def test_it_refuses_an_id_the_group_has_as_an_image_model(staff_client, chat_group, demo_upstream):
    image_model_make(model_id="demo-chat", group=chat_group, upstreams=[demo_upstream])

    response = staff_client.post(ADD, form(chat_group, [demo_upstream]))

    assert response.status_code == 200
    assert "The group already has an image model called &#x27;demo-chat&#x27;." in response.content.decode()
    assert not TextModel.objects.exists()


def test_it_refuses_a_price_with_more_than_eight_places(staff_client, chat_group, demo_upstream):
    response = staff_client.post(ADD, form(chat_group, [demo_upstream], input_price="0.000000001"))

    assert response.status_code == 200
    assert "no more than 8 decimal places" in response.content.decode()
    assert not TextModel.objects.exists()


def test_the_image_model_admin_refuses_an_id_the_group_has_as_a_text_model(
    staff_client, chat_group, demo_upstream
):
    text_model_make(model_id="demo-chat", group=chat_group, upstreams=[demo_upstream])

    response = staff_client.post(
        reverse("admin:images_imagemodel_add"),
        {
            "model_id": "demo-chat",
            "group": chat_group.pk,
            "price": "0.15",
            "upstreams": [demo_upstream.pk],
            "max_n": "1",
            "default_response_format": "b64_json",
            "enabled": "on",
        },
    )

    assert response.status_code == 200
    assert "The group already has a text model called &#x27;demo-chat&#x27;." in response.content.decode()
    assert not ImageModel.objects.exists()


def test_prices_read_with_their_places_in_the_list_and_the_form(staff_client, chat_group, demo_upstream):
    model = text_model_make(
        model_id="demo-chat", group=chat_group, upstreams=[demo_upstream], output_price="0.000024"
    )

    listing = staff_client.get(reverse("admin:chat_textmodel_changelist")).content.decode()
    change = staff_client.get(reverse("admin:chat_textmodel_change", args=[model.pk])).content.decode()

    assert '<td class="field-input">2.00</td>' in listing
    assert '<td class="field-output">0.000024</td>' in listing
    assert '<td class="field-cached_input">= input</td>' in listing
    assert "0.00002400" not in listing and "2.00000000" not in listing
    assert 'name="input_price" value="2.00"' in change
    assert 'name="output_price" value="0.000024"' in change


def test_editing_keeps_the_rules_and_saves_the_change(staff_client, chat_group, demo_upstream):
    model = text_model_make(model_id="demo-chat", group=chat_group, upstreams=[demo_upstream])
    url = reverse("admin:chat_textmodel_change", args=[model.pk])

    assert staff_client.post(url, form(chat_group, [demo_upstream], output_price="9.5")).status_code == 302

    model.refresh_from_db()
    assert model.output_price == Decimal("9.5")


def test_sticky_routing_is_shown_in_the_list_and_changed_in_the_form(staff_client, chat_group, demo_upstream):
    model = text_model_make(model_id="demo-chat", group=chat_group, upstreams=[demo_upstream])
    url = reverse("admin:chat_textmodel_change", args=[model.pk])
    assert 'name="sticky_seconds" value="3600"' in staff_client.get(url).content.decode()

    assert staff_client.post(url, form(chat_group, [demo_upstream], sticky_seconds="0")).status_code == 302

    model.refresh_from_db()
    assert model.sticky_seconds == 0
    listing = staff_client.get(reverse("admin:chat_textmodel_changelist")).content.decode()
    assert '<td class="field-sticky">off</td>' in listing
    refused = staff_client.post(url, form(chat_group, [demo_upstream], sticky_seconds="-1"))
    assert refused.status_code == 200
    model.refresh_from_db()
    assert model.sticky_seconds == 0
