"""Any text in any field of the admin's forms and in its lists' queries, as staff: never a 5xx, and
the ledger's invariants kept.

The fields come from the pages themselves: each add and change form's fields, each list's filter
links. Each example starts from the form's own initial values and replaces, leaves out or adds some
fields, so that the fuzz reaches every field's and every form's own checks.

A field naming rows by id (a relation, the rows an action is for) gets an id, of a row or of none,
not any text: Django's admin itself answers 500 to an id that is not a number where it renders an
autocomplete or selects an action's rows, and on SQLite to one beyond 2^63 in a many-to-many field.
Likewise a list's date drill-down gets a year before 9999: Django answers 500 to the year 9999 (its
end is out of range) and to one that overflows a C long."""

from __future__ import annotations

import re
from decimal import Decimal
from html import unescape
from urllib.parse import parse_qsl, urlsplit

import pytest
from django import forms
from django.apps import apps
from django.contrib.admin import helpers
from django.urls import reverse
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st
from oauth2_provider.models import Application

from billing.models import Wallet
from billing.selectors import ledger_check
from billing.subscriptions import subscription_upsert
from keys.services import api_key_create
from notifications.services import AlertSettingsInput, alert_settings_set
from tests.factories import text_model_make
from tests.fuzz_values import form_encoded, fuzz_settings, texts
from tests.gateway_project import test_admin

pytestmark = pytest.mark.django_db

# Strings the admin's fields give a meaning to, so that the fuzz reaches their branches.
MEANINGFUL = [
    "5.00", "0", "-1", "1e3", "1e400", "9" * 30, "2147483648", "0.000000001", "daily", "total", "active",
    "balance", "subscription", "openai", "anthropic", "gemini", "demo", "1024x1024", "64x64, auto", "png",
    "low", "0-100", "100-0", "https://api.example.com/v1", "http://127.0.0.1:1/", "ENV_NAME", "1", "2",
    "on", "true", "2026-01-01", "2026-01-01 00:00:00", "2026-13-40", "10.0.0.0/8", '{"a": 1}', "[]", "",
]  # fmt: skip
TEXTS = texts(MEANINGFUL)
REGISTERED = [(app, model) for app, model, _admin in test_admin.REGISTERED]
# The models whose rows staff edit (the others' rows only services write: read-only pages).
EDITED = [
    "accounts.account", "accounts.user", "groups.group", "keys.apikey", "billing.subscription",
    "upstreams.upstream", "images.imagemodel", "chat.textmodel", "notifications.alertsettings",
    "oauth2_provider.application",
]  # fmt: skip
PAGES = [(app, model, "add") for app, model in REGISTERED] + [
    (*label.split("."), "change") for label in EDITED
]
IDS = st.sampled_from(["1", "2", "999999", "2147483648"])
DATE_HIERARCHY = ("__year", "__month", "__day")
DATE_PARTS = st.integers(-1, 9998).map(str) | st.text(max_size=3)
FUZZ = fuzz_settings(share=4)
LEFT_OUT = object()
HREF = re.compile(r'href="(\?[^"]*)"')


@pytest.fixture
def admin_site(staff_client, staff, alice, alpha_group, beta_group, chat_group, alpha_model, demo_upstream):
    """Staff signed in; a row of every model in EDITED, for its change page."""
    api_key_create(account=alice, group=alpha_group)
    subscription_upsert(
        account=alice,
        group=beta_group,
        daily_limit=Decimal("1"),
        weekly_limit=None,
        monthly_limit=None,
        total_limit=None,
        starts_at=timezone.now(),
        expires_at=None,
    )
    text_model_make(model_id="fuzz-chat", group=chat_group, upstreams=[demo_upstream])
    alert_settings_set(
        account=alice,
        values=AlertSettingsInput(balance_floor="1.00", percentages=[50], webhook_url="", email_enabled=True),
    )
    Application.objects.create(
        name="fuzzed",
        client_type=Application.CLIENT_CONFIDENTIAL,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris="https://app.example/callback",
        user=staff,
    )
    return staff_client


def form_fields(page) -> tuple[dict[str, str], set[str]]:
    """A rendered admin form's fields and their initial values, as the browser would send them, and
    the names of those that name rows by id."""
    form = page.context["adminform"].form
    values = {}
    ids = {name for name, field in form.fields.items() if isinstance(field, forms.ModelChoiceField)}
    for name, field in form.fields.items():
        value = form[name].value()
        if isinstance(value, list | tuple):
            value = value[0] if value else ""
        values[name] = "" if value is None else str(field.prepare_value(value))
    for formset in page.context.get("inline_admin_formsets", []):
        values.update(
            {
                f"{formset.formset.prefix}-{k}": str(v)
                for k, v in formset.formset.management_form.initial.items()
            }
        )
    return values, ids


def fuzzed(values: dict[str, str], drawn: st.DataObject, ids: set[str] = frozenset()) -> dict[str, str]:
    """Each field kept, left out or replaced by any text (an id, for those in `ids`); at times a field
    no form has."""
    body = dict(values)
    for name in values:
        choice = drawn.draw(st.sampled_from([None, LEFT_OUT]) | (IDS if name in ids else TEXTS))
        if choice is LEFT_OUT:
            del body[name]
        elif choice is not None:
            body[name] = choice
    body.update(drawn.draw(st.dictionaries(TEXTS, TEXTS, max_size=2)))
    return body


def assert_served(response) -> None:
    assert response.status_code < 500, response.content[:1000]


@pytest.mark.parametrize(("app", "model", "kind"), PAGES, ids=[f"{a}.{m}.{k}" for a, m, k in PAGES])
@FUZZ
@given(drawn=st.data())
def test_any_text_in_an_admin_form_is_answered_without_a_server_error(admin_site, app, model, kind, drawn):
    if kind == "add":
        url = reverse(f"admin:{app}_{model}_add")
    else:
        row = apps.get_model(app, model).objects.order_by("pk").first()
        assert row is not None, "the fixture makes a row of every model in EDITED"
        url = reverse(f"admin:{app}_{model}_change", args=[row.pk])
    page = admin_site.get(url)
    if page.status_code == 403 or "adminform" not in page.context:
        return  # a page only services write, or a read-only one
    values, ids = form_fields(page)
    body = fuzzed(values, drawn, ids)

    response = admin_site.post(
        url, data=form_encoded(body.items()), content_type="application/x-www-form-urlencoded"
    )

    assert_served(response)
    assert ledger_check() == []


@pytest.mark.parametrize(("app", "model"), REGISTERED, ids=[f"{a}.{m}" for a, m in REGISTERED])
@FUZZ
@given(drawn=st.data())
def test_any_text_in_an_admin_lists_query_is_answered_without_a_server_error(admin_site, app, model, drawn):
    url = reverse(f"admin:{app}_{model}_changelist")
    page = admin_site.get(url)
    offered = {
        name
        for href in HREF.findall(page.content.decode())
        for name, _ in parse_qsl(urlsplit(unescape(href)).query)
    }
    names = sorted(offered | {"q", "o", "p", "all", "e"})
    chosen = drawn.draw(st.lists(st.sampled_from(names), max_size=4))
    query = [(name, drawn.draw(DATE_PARTS if name.endswith(DATE_HIERARCHY) else TEXTS)) for name in chosen]

    response = admin_site.get(f"{url}?{form_encoded(query)}")

    assert_served(response)


@FUZZ
@given(action=st.sampled_from(["top_up", "adjust"]), amount=TEXTS, note=TEXTS, drawn=st.data())
def test_any_text_in_a_wallet_action_is_answered_without_a_server_error(
    admin_site, alice, action, amount, note, drawn
):
    wallet = Wallet.objects.get(account=alice)
    body = fuzzed(
        {
            "action": action,
            helpers.ACTION_CHECKBOX_NAME: str(wallet.pk),
            "amount": amount,
            "note": note,
            "apply": "1",
        },
        drawn,
        {helpers.ACTION_CHECKBOX_NAME},
    )

    response = admin_site.post(
        reverse("admin:billing_wallet_changelist"),
        data=form_encoded(body.items()),
        content_type="application/x-www-form-urlencoded",
    )

    assert_served(response)
    assert ledger_check() == []
