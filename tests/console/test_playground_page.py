"""The Playground: the account's own models, a call billed exactly like an API call, errors in words."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from decimal import Decimal

from django.utils import timezone

from billing.models import IdempotencyRecord, LedgerEntry, UsageRecord, Wallet
from billing.subscriptions import subscription_upsert
from console.views.playground_images import HOSTED, PLAYGROUND_RESULT_SESSION
from images.models import HostedImage

# The result shows hosted images by their signed links on this site; the session keeps references only.
HOSTED_SRC = re.compile(r'<img src="(/files/images/[^"]+)"')


def test_it_offers_only_models_of_the_accounts_groups(alice_client, alpha_model, beta_model):
    response = alice_client.get("/console/playground/")

    assert response.status_code == 200
    assert list(response.context["form"].fields["model"].queryset) == [alpha_model]
    html = response.content.decode()
    assert "alpha-image-2 — Alpha-Image, ¥0.15 per call" in html
    assert "beta-imagine-image" not in html
    assert '<option value="1024x1024">1024x1024</option>' in html


def test_it_generates_an_image_billed_like_an_api_call(alice_client, alice, alpha_model):
    posted = alice_client.post(
        "/console/playground/",
        {"model": alpha_model.pk, "prompt": "a lighthouse at dusk", "size": "1024x1024", "n": "1"},
    )

    request_id = posted["X-Request-Id"]
    assert posted.status_code == 302
    assert posted["Location"] == f"/console/playground/result/{request_id}/"
    response = alice_client.get(posted["Location"])
    assert response.status_code == 200
    html = response.content.decode()
    images = HOSTED_SRC.findall(html)
    assert len(images) == 1
    shown = alice_client.get(images[0])
    assert shown.status_code == 200 and shown["Content-Type"] == "image/png"
    assert b"".join(shown.streaming_content)[:8] == b"\x89PNG\r\n\x1a\n"
    record = UsageRecord.objects.get(request_id=request_id)
    assert record.account == alice
    assert record.credential == f"console:{alice.pk}"
    assert record.endpoint == "images.generations"
    assert record.status == 200
    assert record.amount == Decimal("0.15")
    charge = LedgerEntry.objects.get(kind=LedgerEntry.Kind.CHARGE, wallet__account=alice)
    assert charge.amount == Decimal("-0.15")
    assert Wallet.objects.get(account=alice).balance == Decimal("9.85")
    assert "charged ¥0.15" in html and request_id in html


def test_it_says_in_plain_words_when_the_balance_does_not_cover_the_call(bob_client, bob, alpha_model):
    response = bob_client.post(
        "/console/playground/", {"model": alpha_model.pk, "prompt": "a lighthouse", "n": "1"}
    )

    assert response.status_code in (402, 403)
    html = response.content.decode()
    assert "Your balance or plan does not cover this call. Nothing was charged." in html
    assert 'role="alert"' in html
    assert HOSTED_SRC.search(html) is None
    record = UsageRecord.objects.get(account=bob)
    assert record.status == response.status_code and record.amount == 0
    assert not LedgerEntry.objects.filter(wallet__account=bob, kind=LedgerEntry.Kind.CHARGE).exists()


def test_it_shows_the_gateways_refusal_of_a_bad_parameter(alice_client, alice, alpha_model):
    response = alice_client.post(
        "/console/playground/", {"model": alpha_model.pk, "prompt": "a lighthouse", "n": "9"}
    )

    # The form allows up to the largest n of the offered models (4): 9 never reaches the gateway.
    assert response.status_code == 400
    assert b"Ensure this value is less than or equal to 4" in response.content
    assert not UsageRecord.objects.filter(account=alice).exists()


def test_it_refuses_a_model_of_a_group_the_account_may_not_use(alice_client, alice, alpha_model, beta_model):
    response = alice_client.post(
        "/console/playground/", {"model": beta_model.pk, "prompt": "a lighthouse", "n": "1"}
    )

    assert response.status_code == 400
    assert b"Select a valid choice" in response.content
    assert not UsageRecord.objects.filter(account=alice).exists()
    assert Wallet.objects.get(account=alice).balance == Decimal("10.00")


def test_it_says_so_when_no_model_is_available(alice_client):
    response = alice_client.get("/console/playground/")

    assert response.status_code == 200
    assert b"None of your groups offers an image model right now" in response.content


def test_it_runs_a_model_of_another_allowed_group_in_that_group(
    alice_client, alice, alpha_model, beta_group, beta_model
):
    alice.allowed_groups.add(beta_group)  # current group stays Alpha-Image
    subscription_upsert(
        account=alice,
        group=beta_group,
        daily_limit=Decimal("1.00"),
        weekly_limit=None,
        monthly_limit=None,
        total_limit=None,
        starts_at=timezone.now() - timedelta(days=1),
        expires_at=None,
    )

    response = alice_client.post(
        "/console/playground/", {"model": beta_model.pk, "prompt": "a lighthouse", "n": "1"}, follow=True
    )

    assert response.status_code == 200, response.content.decode()[-600:]
    record = UsageRecord.objects.get(request_id=response.redirect_chain[0][0].split("/")[-2])
    assert record.group == beta_group and record.billing == "subscription"
    assert HOSTED_SRC.search(response.content.decode())


def test_it_shows_a_price_and_charge_below_a_fen_in_full(alice_client, alice, alpha_model):
    alpha_model.price = Decimal("0.0025")
    alpha_model.save(update_fields=["price"])

    page = alice_client.get("/console/playground/").content.decode()
    response = alice_client.post(
        "/console/playground/", {"model": alpha_model.pk, "prompt": "a lighthouse", "n": "1"}, follow=True
    )

    assert "alpha-image-2 — Alpha-Image, ¥0.0025 per call" in page
    assert response.status_code == 200
    assert "charged ¥0.0025" in response.content.decode()
    assert Wallet.objects.get(account=alice).balance == Decimal("9.9975")


def _charges(account) -> list[Decimal]:
    return list(
        LedgerEntry.objects.filter(kind=LedgerEntry.Kind.CHARGE, wallet__account=account).values_list(
            "amount", flat=True
        )
    )


def test_reloading_the_result_shows_it_again_without_a_second_charge(alice_client, alice, alpha_model):
    posted = alice_client.post(
        "/console/playground/", {"model": alpha_model.pk, "prompt": "a lighthouse", "n": "1"}
    )

    first = alice_client.get(posted["Location"])
    reloaded = alice_client.get(posted["Location"])

    assert first.status_code == reloaded.status_code == 200
    assert HOSTED_SRC.search(reloaded.content.decode())
    assert "charged ¥0.15" in reloaded.content.decode()
    assert _charges(alice) == [Decimal("-0.15")]
    assert UsageRecord.objects.filter(account=alice).count() == 1


def test_the_same_playground_form_sent_twice_is_charged_once(alice_client, alice, alpha_model):
    form = alice_client.get("/console/playground/").context["form"]
    fields = {
        "model": alpha_model.pk,
        "prompt": "a lighthouse",
        "n": "1",
        "form_token": form["form_token"].value(),
    }

    first = alice_client.post("/console/playground/", fields)
    second = alice_client.post("/console/playground/", fields)

    assert first.status_code == second.status_code == 302
    # The replay leads to the first call's result, under the first call's request id.
    assert second["Location"] == first["Location"] == f"/console/playground/result/{first['X-Request-Id']}/"
    assert _charges(alice) == [Decimal("-0.15")]
    assert Wallet.objects.get(account=alice).balance == Decimal("9.85")
    page = alice_client.get(second["Location"]).content.decode()
    assert "charged ¥0.15" in page and HOSTED_SRC.search(page)


ANSWER_LOST = {
    "error": {"message": "The first request was charged; its answer was lost.", "type": "api_error"}
}


def test_a_form_whose_charged_call_lost_its_answer_says_so_when_sent_again(alice_client, alice, alpha_model):
    token = alice_client.get("/console/playground/").context["form"]["form_token"].value()
    fields = {"model": alpha_model.pk, "prompt": "a lighthouse", "n": "1", "form_token": token}
    first = alice_client.post("/console/playground/", fields)
    # What the form's key keeps when its call was charged and then failed: a 500, replayed.
    IdempotencyRecord.objects.filter(account=alice, key=f"console-playground:{token}").update(
        response_status=500, response_body=json.dumps(ANSWER_LOST).encode()
    )

    again = alice_client.post("/console/playground/", fields)

    assert again.status_code == 500
    page = again.content.decode()
    assert "This form&#x27;s call was made and charged, but its answer could not be shown." in page
    assert "The first request was charged; its answer was lost." in page
    assert first["X-Request-Id"] in page  # the charged call's request id
    assert _charges(alice) == [Decimal("-0.15")]


def test_each_rendered_form_has_its_own_token(alice_client, alpha_model):
    first = alice_client.get("/console/playground/").context["form"]["form_token"].value()
    second = alice_client.get("/console/playground/").context["form"]["form_token"].value()

    assert first and second and first != second


def test_a_sent_form_changed_and_sent_again_asks_to_send_once_more(alice_client, alice, alpha_model):
    token = alice_client.get("/console/playground/").context["form"]["form_token"].value()
    fields = {"model": alpha_model.pk, "prompt": "a lighthouse", "n": "1", "form_token": token}
    alice_client.post("/console/playground/", fields)

    again = alice_client.post("/console/playground/", {**fields, "prompt": "a windmill"})

    assert again.status_code == 409
    assert b"This form was already sent" in again.content
    renewed = again.context["form"]["form_token"].value()
    assert renewed != token
    assert again.context["form"]["prompt"].value() == "a windmill"
    assert _charges(alice) == [Decimal("-0.15")]
    third = alice_client.post(
        "/console/playground/", {**fields, "prompt": "a windmill", "form_token": renewed}
    )
    assert third.status_code == 302
    assert len(_charges(alice)) == 2


def test_only_the_latest_result_is_kept(alice_client, alice, alpha_model):
    fields = {"model": alpha_model.pk, "prompt": "a lighthouse", "n": "1"}
    first = alice_client.post("/console/playground/", fields)
    second = alice_client.post("/console/playground/", fields)

    gone = alice_client.get(first["Location"])

    assert gone.status_code == 404
    assert b"no longer shown here" in gone.content
    assert alice_client.get(second["Location"]).status_code == 200
    assert len(_charges(alice)) == 2


def test_a_result_of_another_session_is_not_shown(client, alice_client, bob, alpha_model):
    posted = alice_client.post(
        "/console/playground/", {"model": alpha_model.pk, "prompt": "a lighthouse", "n": "1"}
    )
    client.logout()
    client.force_login(bob.user)

    response = client.get(posted["Location"])

    assert response.status_code == 404
    assert HOSTED_SRC.search(response.content.decode()) is None


def test_the_session_keeps_references_to_the_images_not_the_images(alice_client, alice, alpha_model):
    posted = alice_client.post(
        "/console/playground/", {"model": alpha_model.pk, "prompt": "a lighthouse", "n": "2"}
    )

    kept = alice_client.session[PLAYGROUND_RESULT_SESSION]
    stored = HostedImage.objects.order_by("pk")
    assert kept["request_id"] == posted["X-Request-Id"]
    assert [ref[:2] for ref in kept["images"]] == [[HOSTED, image.public_id.hex] for image in stored]
    assert all(image.size_bytes > 0 for image in stored) and stored.count() == 2
    assert len(json.dumps(kept)) < 1000  # whatever the images weigh
    assert "base64" not in json.dumps(dict(alice_client.session.items()))


def test_a_result_whose_images_were_purged_shows_what_is_left(alice_client, alice, alpha_model):
    posted = alice_client.post(
        "/console/playground/", {"model": alpha_model.pk, "prompt": "a lighthouse", "n": "2"}
    )
    HostedImage.objects.order_by("pk").first().delete()  # purge_images removed it meanwhile

    page = alice_client.get(posted["Location"]).content.decode()

    assert len(HOSTED_SRC.findall(page)) == 1
    assert "charged ¥0.15" in page
