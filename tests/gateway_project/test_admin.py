from decimal import Decimal

import pytest
from django.contrib import admin
from django.urls import reverse
from django.utils import timezone

from accounts.models import Account, User
from billing.holds import hold_capture, hold_reserve
from billing.ledger import wallet_adjust, wallet_top_up
from billing.models import Hold, LedgerEntry, Subscription, UsageRecord, Wallet
from billing.subscriptions import subscription_upsert
from billing.usage import TokenCounts, usage_record_build, usage_record_insert
from keys.models import ApiKey
from keys.secrets import api_key_hash

pytestmark = pytest.mark.django_db

REGISTERED = sorted(
    (model._meta.app_label, model._meta.model_name, model_admin)
    for model, model_admin in admin.site._registry.items()
)


# Models whose rows only services write: their add pages are refused by design.
ADD_REFUSED = {
    ("billing", "wallet"),  # created with the account
    ("billing", "ledgerentry"),  # append-only, written by billing services
    ("billing", "hold"),
    ("billing", "usagerecord"),
    ("billing", "subscriptionusage"),
    ("billing", "idempotencyrecord"),
    ("images", "hostedimage"),  # written by image calls
    ("notifications", "notification"),  # the outbox, written with the charge that crossed a line
    ("oauth2_provider", "accesstoken"),  # issued by the OAuth flow or createtoken
    ("oauth2_provider", "refreshtoken"),
    ("oauth2_provider", "grant"),
    ("oauth2_provider", "idtoken"),
}


@pytest.mark.parametrize(
    ("app", "model", "model_admin"), REGISTERED, ids=[f"{a}.{m}" for a, m, _ in REGISTERED]
)
def test_every_changelist_and_add_page_loads_for_staff(
    staff_client, alice, alpha_model, app, model, model_admin
):
    assert staff_client.get(reverse(f"admin:{app}_{model}_changelist")).status_code == 200
    add = staff_client.get(reverse(f"admin:{app}_{model}_add"))
    assert add.status_code == (403 if (app, model) in ADD_REFUSED else 200)


def test_every_change_page_loads_for_staff(staff_client, alice, alpha_model):
    for model, _ in admin.site._registry.items():
        obj = model.objects.first()
        if obj is None:
            continue
        url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_change", args=[obj.pk])
        assert staff_client.get(url).status_code == 200, url


def test_the_admin_needs_a_staff_user(client, alice):
    client.force_login(alice.user)
    response = client.get(reverse("admin:billing_wallet_changelist"))
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


def test_it_tops_up_a_wallet_through_a_confirmed_action_that_writes_the_ledger(staff_client, staff, alice):
    url = reverse("admin:billing_wallet_changelist")
    wallet = Wallet.objects.get(account=alice)
    confirm = staff_client.post(url, {"action": "top_up", "_selected_action": [wallet.pk]})
    assert confirm.status_code == 200
    assert b"Confirm" in confirm.content
    assert Wallet.objects.get(pk=wallet.pk).balance == Decimal("10")  # nothing moved before confirming
    done = staff_client.post(
        url,
        {
            "action": "top_up",
            "_selected_action": [wallet.pk],
            "apply": "1",
            "amount": "5.25",
            "note": "invoice 7",
        },
    )
    assert done.status_code == 302
    wallet.refresh_from_db()
    assert wallet.balance == Decimal("15.25")
    entry = LedgerEntry.objects.filter(wallet=wallet).latest("id")
    assert (entry.kind, entry.amount, entry.created_by, entry.note) == (
        "top_up",
        Decimal("5.25"),
        staff,
        "invoice 7",
    )


def test_an_adjustment_needs_a_note_and_cannot_overdraw(staff_client, alice):
    url = reverse("admin:billing_wallet_changelist")
    wallet = Wallet.objects.get(account=alice)
    no_note = staff_client.post(
        url, {"action": "adjust", "_selected_action": [wallet.pk], "apply": "1", "amount": "-1", "note": ""}
    )
    assert no_note.status_code == 200  # the form comes back with the error
    staff_client.post(
        url,
        {"action": "adjust", "_selected_action": [wallet.pk], "apply": "1", "amount": "-11", "note": "oops"},
    )
    wallet.refresh_from_db()
    assert wallet.balance == Decimal("10")
    assert LedgerEntry.objects.filter(wallet=wallet).count() == 1


def test_the_wallet_balance_is_not_editable(staff_client, alice):
    wallet = Wallet.objects.get(account=alice)
    url = reverse("admin:billing_wallet_change", args=[wallet.pk])
    staff_client.post(url, {"balance": "999"})
    assert Wallet.objects.get(pk=wallet.pk).balance == Decimal("10")


def test_adding_a_key_in_the_admin_shows_the_secret_once_and_stores_its_hash(
    staff_client, alice, alpha_group
):
    response = staff_client.post(
        reverse("admin:keys_apikey_add"),
        {"account": alice.pk, "group": alpha_group.pk, "label": "from admin"},
        follow=True,
    )
    assert response.status_code == 200
    api_key = ApiKey.objects.get()
    secret = next(m.message for m in response.context["messages"] if "shown once" in m.message)
    secret = secret.split("<code>")[1].split("</code>")[0]
    assert api_key.key_hash == api_key_hash(secret)
    # The change page never shows it again.
    page = staff_client.get(reverse("admin:keys_apikey_change", args=[api_key.pk]))
    assert secret not in page.content.decode()
    assert api_key.prefix in page.content.decode()


def test_the_admin_refuses_a_key_for_a_group_the_account_may_not_use(staff_client, alice, beta_group):
    response = staff_client.post(
        reverse("admin:keys_apikey_add"), {"account": alice.pk, "group": beta_group.pk, "label": "x"}
    )

    assert response.status_code == 200  # the form again, with the error
    assert "may not use the group" in response.content.decode()
    assert not ApiKey.objects.exists()


def test_the_upstream_admin_shows_circuit_state_and_recent_errors(staff_client, demo_upstream):
    from django.core.cache import cache

    from upstreams.circuit import circuit_record_failure, circuit_record_success, circuit_stats_flush

    circuit_stats_flush()  # earlier tests' buffered counts must not land in this test's counters
    cache.clear()
    circuit_record_success(upstream_id=demo_upstream.pk)
    for _ in range(5):
        circuit_record_failure(upstream_id=demo_upstream.pk, threshold=5, cooldown=30)
    page = staff_client.get(reverse("admin:upstreams_upstream_changelist")).content.decode()
    assert "open" in page
    assert "5/6 (83%)" in page
    selection = {"action": "close_circuits", "_selected_action": [demo_upstream.pk]}
    url = reverse("admin:upstreams_upstream_changelist")
    assert b"Yes, confirm" in staff_client.post(url, selection).content
    assert "open" in staff_client.get(url).content.decode()  # nothing before confirming
    staff_client.post(url, {**selection, "confirmed": "yes"})
    assert (
        "closed (0 consecutive failures)"
        in staff_client.get(reverse("admin:upstreams_upstream_changelist")).content.decode()
    )
    cache.clear()


def test_revoking_keys_in_the_admin_is_confirmed_first(staff_client, alice, alpha_group):
    from keys.services import api_key_create

    api_key, _ = api_key_create(account=alice, group=alpha_group, label="to revoke")
    url = reverse("admin:keys_apikey_changelist")
    selection = {"action": "revoke_keys", "_selected_action": [api_key.pk]}
    confirm = staff_client.post(url, selection)
    assert confirm.status_code == 200
    assert "to revoke" in confirm.content.decode()
    assert ApiKey.objects.get(pk=api_key.pk).revoked_at is None
    staff_client.post(url, {**selection, "confirmed": "yes"})
    assert ApiKey.objects.get(pk=api_key.pk).status == "revoked"


def test_model_capabilities_are_edited_as_lists_and_validated(staff_client, alpha_model, demo_upstream):
    url = reverse("admin:images_imagemodel_change", args=[alpha_model.pk])
    page = staff_client.get(url).content.decode()
    assert 'value="1024x1024, 1024x1536, 64x64, auto"' in page
    form = {
        "model_id": alpha_model.model_id,
        "group": alpha_model.group_id,
        "price": "0.15",
        "upstream_model": "",
        "upstreams": [demo_upstream.pk],
        "sizes": "1024x1024, 512x512",
        "qualities": "low, high",
        "styles": "",
        "backgrounds": "",
        "output_formats": "png, jpeg",
        "output_compression_min": "0",
        "output_compression_max": "100",
        "max_n": "2",
        "default_response_format": "b64_json",
        "enabled": "on",
    }
    assert staff_client.post(url, form).status_code == 302
    alpha_model.refresh_from_db()
    assert alpha_model.sizes == ["1024x1024", "512x512"]
    assert alpha_model.output_formats == ["png", "jpeg"]
    refused = staff_client.post(url, {**form, "sizes": "big", "output_formats": "gif"})
    assert refused.status_code == 200
    assert "sizes must be" in refused.content.decode()
    alpha_model.refresh_from_db()
    assert alpha_model.sizes == ["1024x1024", "512x512"]


def test_a_compression_range_with_one_end_is_refused_on_its_field(staff_client, alpha_model, demo_upstream):
    url = reverse("admin:images_imagemodel_change", args=[alpha_model.pk])
    form = {
        "model_id": alpha_model.model_id,
        "group": alpha_model.group_id,
        "price": "0.15",
        "upstreams": [demo_upstream.pk],
        "sizes": "1024x1024",
        "output_compression_min": "10",
        "output_compression_max": "",
        "max_n": "2",
        "default_response_format": "b64_json",
    }

    refused = staff_client.post(url, form)

    assert refused.status_code == 200
    errors = refused.context["adminform"].form.errors
    assert errors["output_compression_min"] == ["give both ends of the range or neither"]
    alpha_model.refresh_from_db()
    assert alpha_model.output_compression_range == (0, 100)


def test_adding_an_account_in_the_admin_makes_its_wallet_and_keeps_its_groups(
    staff_client, alpha_group, beta_group
):
    user = User.objects.create_user(username="carol", password="carol-password-1")
    response = staff_client.post(
        reverse("admin:accounts_account_add"),
        {"user": user.pk, "current_group": alpha_group.pk, "allowed_groups": [alpha_group.pk, beta_group.pk]},
        follow=True,
    )
    assert response.status_code == 200
    account = Account.objects.get(user=user)
    assert account.current_group == alpha_group
    assert set(account.allowed_groups.values_list("pk", flat=True)) == {alpha_group.pk, beta_group.pk}
    assert Wallet.objects.get(account=account).balance == Decimal("0")


def _usage(account, request_id: str, *, endpoint: str, amount: str, tokens: TokenCounts | None):
    return usage_record_build(
        request_id=request_id,
        account_id=account.pk,
        credential=f"console:{account.pk}",
        group_id=None,
        model_id="alpha-chat" if tokens else "alpha-image-2",
        endpoint=endpoint,
        billing="balance",
        status=200,
        error_code="",
        amount=Decimal(amount),
        upstream="demo",
        latency_ms=9,
        tokens=tokens,
    )


@pytest.fixture
def text_call(alice):
    """Alice's balance brought to ¥33.08, then a text call charged ¥0.000024 of the ¥0.01 it held,
    an image call's record and a hold still open."""
    wallet_top_up(account=alice, amount="23.58")
    wallet_adjust(account=alice, amount="-0.5", note="refund reversed")
    hold = hold_reserve(account_id=alice.pk, amount=Decimal("0.01"), reference="req_chat")
    record = _usage(
        alice, "req_chat", endpoint="chat.completions", amount="0", tokens=TokenCounts(input=1234, output=56)
    )
    assert hold_capture(hold=hold, amount=Decimal("0.000024"), usage_record=record)
    usage_record_insert(
        record=_usage(alice, "req_image", endpoint="images.generations", amount="0.15", tokens=None)
    )
    hold_reserve(account_id=alice.pk, amount=Decimal("0.15"), reference="req_in_flight")
    return hold


def _page(staff_client, url: str) -> str:
    response = staff_client.get(url)
    assert response.status_code == 200, url
    html = response.content.decode()
    for unread in ("0000000", "0E-"):  # no fixed eight places, no exponent notation
        assert unread not in html, (url, unread)
    return html


def test_the_billing_lists_show_amounts_as_people_read_them(staff_client, alice, text_call):
    wallets = _page(staff_client, reverse("admin:billing_wallet_changelist"))
    ledger = _page(staff_client, reverse("admin:billing_ledgerentry_changelist"))
    holds = _page(staff_client, reverse("admin:billing_hold_changelist"))
    usage = _page(staff_client, reverse("admin:billing_usagerecord_changelist"))

    assert "¥33.079976" in wallets and "¥0.15" in wallets and "¥32.929976" in wallets
    assert "¥23.58" in ledger and "-¥0.50" in ledger and "¥33.08" in ledger and "-¥0.000024" in ledger
    assert "¥0.01" in holds and "¥0.000024" in holds and "column-captured_amount_shown" in holds
    assert "¥0.000024" in usage and "¥0.15" in usage


def test_the_billing_change_pages_show_amounts_as_people_read_them(staff_client, alice, text_call):
    wallet = Wallet.objects.get(account=alice)
    entry = LedgerEntry.objects.get(kind=LedgerEntry.Kind.CHARGE)
    record = UsageRecord.objects.get(request_id="req_chat")

    wallet_page = _page(staff_client, reverse("admin:billing_wallet_change", args=[wallet.pk]))
    entry_page = _page(staff_client, reverse("admin:billing_ledgerentry_change", args=[entry.pk]))
    hold_page = _page(staff_client, reverse("admin:billing_hold_change", args=[text_call.pk]))
    record_page = _page(staff_client, reverse("admin:billing_usagerecord_change", args=[record.pk]))

    assert "¥33.079976" in wallet_page and 'name="balance"' not in wallet_page
    assert "-¥0.000024" in entry_page and "¥33.079976" in entry_page
    assert "¥0.01" in hold_page and "¥0.000024" in hold_page
    assert "¥0.000024" in record_page and "1234" in record_page


def test_the_usage_list_shows_tokens_and_filters_by_endpoint(staff_client, alice, text_call):
    url = reverse("admin:billing_usagerecord_changelist")

    text_only = staff_client.get(url, {"endpoint": "chat.completions"})

    assert text_only.status_code == 200
    assert [row.request_id for row in text_only.context["cl"].result_list] == ["req_chat"]
    html = text_only.content.decode()
    for column in ("input_tokens", "cached_tokens", "cache_write_tokens", "output_tokens"):
        assert f"column-{column}" in html
    assert '<td class="field-input_tokens">1234</td>' in html
    assert '<td class="field-output_tokens">56</td>' in html
    images = staff_client.get(url, {"endpoint": "images.generations"}).content.decode()
    assert '<td class="field-input_tokens">-</td>' in images


def test_the_top_up_page_shows_balances_and_confirms_a_fraction_of_a_fen(staff_client, alice, text_call):
    url = reverse("admin:billing_wallet_changelist")
    wallet = Wallet.objects.get(account=alice)

    confirm = staff_client.post(url, {"action": "top_up", "_selected_action": [wallet.pk]})
    done = staff_client.post(
        url,
        {"action": "top_up", "_selected_action": [wallet.pk], "apply": "1", "amount": "0.000024", "note": ""},
        follow=True,
    )

    assert "balance ¥33.079976, held ¥0.15" in confirm.content.decode()
    assert "Top up wallets: ¥0.000024 written to 1 wallet(s)." in done.content.decode()
    assert Wallet.objects.get(pk=wallet.pk).balance == Decimal("33.08")


def test_editable_amounts_are_offered_trimmed_and_saved_exactly(staff_client, alice, beta_group):
    subscription, _ = subscription_upsert(
        account=alice,
        group=beta_group,
        daily_limit=Decimal("0.5"),
        weekly_limit=None,
        monthly_limit=Decimal("0.000024"),
        total_limit=None,
        starts_at=timezone.now(),
        expires_at=None,
    )
    url = reverse("admin:billing_subscription_change", args=[subscription.pk])

    page = staff_client.get(url).content.decode()
    listed = _page(staff_client, reverse("admin:billing_subscription_changelist"))

    assert 'name="daily_limit" value="0.50"' in page
    assert 'name="monthly_limit" value="0.000024"' in page
    assert "¥0.50" in listed and "¥0.000024" in listed
    saved = staff_client.post(
        url,
        {
            "account": alice.pk,
            "group": beta_group.pk,
            "daily_limit": "0.50",
            "weekly_limit": "",
            "monthly_limit": "0.000025",
            "total_limit": "",
            "model_ids": "[]",
            "starts_at_0": "2025-01-01",
            "starts_at_1": "00:00:00",
            "expires_at_0": "",
            "expires_at_1": "",
        },
    )
    assert saved.status_code == 302, saved.content.decode()[:2000]
    subscription = Subscription.objects.get(pk=subscription.pk)
    assert (subscription.daily_limit, subscription.monthly_limit) == (Decimal("0.5"), Decimal("0.000025"))


def test_an_open_hold_shows_no_captured_amount_yet(staff_client, alice):
    hold = hold_reserve(account_id=alice.pk, amount=Decimal("0.15"), reference="req_open")

    html = _page(staff_client, reverse("admin:billing_hold_changelist"))

    assert Hold.objects.get(pk=hold.pk).captured_amount is None
    assert '<td class="field-captured_amount_shown">-</td>' in html


def test_the_account_list_shows_each_balance_as_people_read_it(staff_client, alice, text_call):
    html = _page(staff_client, reverse("admin:accounts_account_changelist"))

    assert '<td class="field-balance">¥33.079976</td>' in html


def test_the_admin_names_the_product_and_hides_djangos_permission_groups(staff_client):
    index = staff_client.get(reverse("admin:index")).content.decode()
    assert "Image Gateway admin" in index
    assert "Django administration" not in index
    assert "/admin/auth/group/" not in index
    user_page = staff_client.get(reverse("admin:accounts_user_change", args=[User.objects.first().pk]))
    assert 'name="groups"' not in user_page.content.decode()


def test_the_top_up_page_has_one_heading_and_top_up_help(staff_client, alice):
    url = reverse("admin:billing_wallet_changelist")
    wallet = Wallet.objects.get(account=alice)
    page = staff_client.post(url, {"action": "top_up", "_selected_action": [wallet.pk]}).content.decode()
    assert page.count("<h1>Top up wallets</h1>") == 1
    assert "may be negative" not in page and "to credit" in page


def test_an_invalid_amount_comes_back_as_a_form_error_with_the_input_kept(staff_client, alice):
    url = reverse("admin:billing_wallet_changelist")
    wallet = Wallet.objects.get(account=alice)
    for action, amount, note in (("top_up", "-5", ""), ("top_up", "abc", ""), ("adjust", "-11", "oops")):
        page = staff_client.post(
            url,
            {"action": action, "_selected_action": [wallet.pk], "apply": "1", "amount": amount, "note": note},
        )
        html = page.content.decode()
        assert page.status_code == 200, amount
        assert 'class="errorlist' in html, amount
        assert f'value="{amount}"' in html, amount
    assert Wallet.objects.get(pk=wallet.pk).balance == Decimal("10")
