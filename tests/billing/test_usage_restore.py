"""`usage_records_restore`: only the gateway's signed `usage_record_lost` lines are written back; any
other line is refused, reported, and the lines after it are still restored."""

from __future__ import annotations

import io
import json
from decimal import Decimal

import pytest
from django.core.management import call_command

from billing.models import UsageRecord
from billing.usage import text_storable, usage_record_insert, usage_record_lost_line, usage_records_restore
from tests.billing.conftest import usage_record_draft

pytestmark = pytest.mark.django_db


def _line(message: str) -> str:
    return f"2026-01-01 00:00:00,000 ERROR api.usage {message}\n"


def test_restore_writes_a_signed_line_and_skips_it_the_second_time(alice):
    lines = [_line(usage_record_lost_line(record=usage_record_draft(alice, request_id="req_lost")))]

    first = usage_records_restore(lines=lines)
    second = usage_records_restore(lines=lines)

    assert (first.written, first.skipped, first.refused) == (1, 0, [])
    assert (second.written, second.skipped, second.refused) == (0, 1, [])
    assert UsageRecord.objects.get().request_id == "req_lost"


def test_unsigned_and_altered_lines_are_refused_and_the_lines_after_them_restored(alice, bob):
    kept = usage_record_insert(record=usage_record_draft(bob, request_id="req_bob", amount=Decimal("0.15")))
    forged_update = "usage_record_lost " + json.dumps(
        {"id": kept.pk, "status": 500, "error_code": "x", "latency_ms": 1}
    )
    signed = usage_record_lost_line(record=usage_record_draft(bob, request_id="req_bob_2"))
    altered = signed.replace('"amount": "0"', '"amount": "99.00"')
    assert altered != signed
    genuine = usage_record_lost_line(record=usage_record_draft(alice, request_id="req_alice"))

    report = usage_records_restore(
        lines=[_line("a plain line"), _line(forged_update), _line(altered), _line(genuine)]
    )

    assert [number for number, _ in report.refused] == [2, 3]
    assert (report.written, report.skipped) == (1, 0)
    kept.refresh_from_db()
    assert kept.status == 200
    assert not UsageRecord.objects.filter(request_id="req_bob_2").exists()
    assert UsageRecord.objects.get(request_id="req_alice").account_id == alice.pk


def test_a_signed_line_that_cannot_be_written_is_reported_and_restore_goes_on(alice):
    unwritable = usage_record_draft(alice, request_id="req_bad")
    unwritable.status = "not a status"
    genuine = usage_record_draft(alice, request_id="req_after")

    report = usage_records_restore(
        lines=[
            _line(usage_record_lost_line(record=unwritable)),
            _line(usage_record_lost_line(record=genuine)),
        ]
    )

    assert [number for number, _ in report.refused] == [1]
    assert "not restorable" in report.refused[0][1]
    assert list(UsageRecord.objects.values_list("request_id", flat=True)) == ["req_after"]


def test_a_json_log_line_is_restored_from_its_message(alice):
    message = usage_record_lost_line(record=usage_record_draft(alice, request_id="req_json"))
    line = json.dumps({"time": "2026-01-01", "level": "ERROR", "logger": "api.usage", "message": message})

    report = usage_records_restore(lines=[line + "\n"])

    assert (report.written, report.refused) == (1, [])
    assert UsageRecord.objects.get().request_id == "req_json"


def test_the_command_reports_each_refused_line_and_the_totals(alice, tmp_path):
    log = tmp_path / "gateway.log"
    genuine = usage_record_lost_line(record=usage_record_draft(alice, request_id="req_cmd"))
    log.write_text(_line('usage_record_lost {"request_id": "forged"}') + _line(genuine))
    out, err = io.StringIO(), io.StringIO()

    call_command("usage_records_restore", str(log), stdout=out, stderr=err)

    assert f"{log}:1: refused (unsigned or altered)" in err.getvalue()
    assert "Restored 1 usage record(s); 0 already there; 1 line(s) refused." in out.getvalue()
    assert UsageRecord.objects.get().request_id == "req_cmd"


def test_a_record_is_built_storable_whatever_its_text_holds(alice):
    record = usage_record_insert(record=usage_record_draft(alice, model_id="a\x00b\ud800c\udfff"))

    record.refresh_from_db()
    assert record.model_id == "a\ufffdb\ufffdc\ufffd"
    assert text_storable("plain ü 漢 \U0001f600") == "plain ü 漢 \U0001f600"
