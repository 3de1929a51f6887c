"""What a key holder sends that the gateway must take apart safely (docs/failure-modes.md, "A caller's
odd bytes"): control characters that would forge log lines, bytes PostgreSQL cannot store.

Real processes on loopback: gunicorn (gevent) on the test database with the text log it is deployed
with, and the fake upstream; the log it writes is what `usage_records_restore` reads back.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from urllib.parse import quote

import pytest
import requests
from django.core.management import call_command
from django.db import connection

from accounts.services import account_create, account_set_groups
from billing.ledger import wallet_top_up
from billing.models import Hold, UsageRecord, Wallet
from billing.selectors import ledger_check
from billing.usage import usage_record_build, usage_record_lost_line
from keys.services import api_key_create
from tests.factories import image_model_make
from tests.gunicorn_server import gunicorn_serving

ON_POSTGRES = connection.vendor == "postgresql"

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not ON_POSTGRES, reason="the server shares the test database: needs PostgreSQL"),
    pytest.mark.django_db(transaction=True),
]

GEN = "/v1/images/generations"


@dataclass
class Gateway:
    base_url: str
    log: Path
    upstream: object
    alice_key: str
    bob_key: str
    bob_id: int

    def generate(self, key: str, model: str, request_id: str) -> requests.Response:
        return requests.post(
            f"{self.base_url}{GEN}",
            json={"model": model, "prompt": "a lighthouse"},
            headers={"Authorization": f"Bearer {key}", "X-Request-Id": request_id},
            timeout=20,
        )


@pytest.fixture
def gateway(alice, alpha_group, fake_upstream_make, fake_upstream, tmp_path):
    bob = account_create(username="bob-hostile", email="bob-h@example.com", password="bob-password-1")
    account_set_groups(account=bob, allowed_groups=[alpha_group], current_group=alpha_group)
    wallet_top_up(account=bob, amount="5.00", reference="fixture")
    image_model_make(model_id="alpha-fake", group=alpha_group, upstreams=[fake_upstream_make()], price="0.25")
    alice_key = api_key_create(account=alice, group=alpha_group, label="hostile")[1]
    bob_key = api_key_create(account=bob, group=alpha_group, label="bystander")[1]
    log = tmp_path / "gunicorn.log"
    env = {"GUNICORN_WORKER_CLASS": "", "LOG_FORMAT": "text", "LOG_LEVEL": "INFO"}
    with gunicorn_serving(log_path=log, env=env) as base_url:
        yield Gateway(
            base_url=base_url,
            log=log,
            upstream=fake_upstream,
            alice_key=alice_key,
            bob_key=bob_key,
            bob_id=bob.pk,
        )


def _lost_json(**fields: object) -> str:
    return "usage_record_lost " + json.dumps(fields)


def test_a_model_name_cannot_write_a_usage_record_line_that_restore_trusts(gateway):
    bob_call = gateway.generate(gateway.bob_key, "alpha-fake", "hostile-bob-1")
    assert bob_call.status_code == 200
    bob_record = UsageRecord.objects.get(request_id="hostile-bob-1")
    rewrite = _lost_json(id=bob_record.pk, status=500, error_code="forged", latency_ms=1)
    insert = _lost_json(
        request_id="hostile-forged-1",
        account_id=gateway.bob_id,
        credential="forged",
        group_id=None,
        model_id="alpha-fake",
        endpoint=GEN,
        billing="balance",
        status=200,
        error_code="",
        amount="99.00",
        upstream="fake-openai",
        latency_ms=1,
        input_tokens=None,
        cached_tokens=None,
        cache_write_tokens=None,
        output_tokens=None,
        created_at=str(bob_record.created_at),
    )
    for index, forged in enumerate((rewrite, insert)):
        for newline in ("\n", "\r", "\r\n", "\u2028"):
            answer = gateway.generate(
                gateway.alice_key, f"x{newline}{forged}{newline}y", f"hostile-a-{index}"
            )
            assert answer.status_code == 404  # no such model: the call is recorded and logged
    # A genuine lost record after the forged lines: the gateway's own signed line.
    genuine = usage_record_build(
        request_id="hostile-genuine-1",
        account_id=gateway.bob_id,
        credential="bystander",
        group_id=None,
        model_id="alpha-fake",
        endpoint=GEN,
        billing="balance",
        status=502,
        error_code="upstream_error",
        amount=Decimal("0"),
        upstream="fake-openai",
        latency_ms=12,
    )
    with gateway.log.open("a") as log:
        log.write(f"2026-01-01 00:00:00,000 ERROR api.usage {usage_record_lost_line(record=genuine)}\n")

    text = gateway.log.read_text()
    assert not [line for line in text.splitlines() if line.startswith("usage_record_lost")]
    out, err = io.StringIO(), io.StringIO()
    call_command("usage_records_restore", str(gateway.log), stdout=out, stderr=err)

    bob_record.refresh_from_db()
    assert (bob_record.status, bob_record.error_code) == (200, "")
    assert not UsageRecord.objects.filter(request_id="hostile-forged-1").exists()
    assert UsageRecord.objects.get(request_id="hostile-genuine-1").status == 502
    assert sum(r.amount for r in UsageRecord.objects.filter(account_id=gateway.bob_id)) == Decimal("0.25")
    assert "Restored 1 usage record(s)" in out.getvalue()
    assert "refused (unsigned or altered)" in err.getvalue()
    assert ledger_check() == []


@pytest.mark.parametrize("odd", ["\x00", "\ud800", "\udfff\x00\x1b"], ids=["nul", "surrogate", "mixed"])
def test_a_record_with_bytes_postgresql_cannot_store_is_written_with_replacement_characters(gateway, odd):
    answer = gateway.generate(gateway.alice_key, f"alpha{odd}fake", "hostile-odd-1")

    assert answer.status_code == 404
    record = UsageRecord.objects.get(request_id="hostile-odd-1")
    expected = "alpha" + "".join("\ufffd" if ch in "\x00\ud800\udfff" else ch for ch in odd) + "fake"
    assert (record.model_id, record.status, record.amount) == (expected, 404, Decimal("0"))
    assert "usage_record_lost" not in gateway.log.read_text()


@pytest.mark.parametrize(
    "location",
    ["http://[::1]:9404/x.png", "http://[::1/x.png", "http://::1]:9404/x.png", "http://[::ffff:127.0.0.1]/x"],
    ids=["ipv6-literal", "unclosed-bracket", "unopened-bracket", "mapped-ipv4"],
)
def test_an_image_redirect_to_an_ipv6_literal_is_the_502_of_any_refused_url(gateway, alice, location):
    redirect = f"http://127.0.0.1:{gateway.upstream.port}/redirect?to={quote(location, safe='')}"
    gateway.upstream.script(GEN, {"status": 200, "json": {"created": 1, "data": [{"url": redirect}]}})
    balance = Wallet.objects.get(account=alice).balance

    answer = gateway.generate(gateway.alice_key, "alpha-fake", "hostile-v6-1")

    assert answer.status_code == 502, answer.text
    assert answer.json()["error"]["type"] == "upstream_error"
    assert Wallet.objects.get(account=alice).balance == balance
    assert not Hold.objects.filter(status="open").exists()
    assert UsageRecord.objects.get(request_id="hostile-v6-1").status == 502
    assert (
        "redirected to" in gateway.log.read_text()
        or "not on the upstream's own host" in gateway.log.read_text()
    )
    assert ledger_check() == []
