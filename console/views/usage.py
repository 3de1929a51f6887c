"""The usage page: the account's calls, filtered and paged, and the same calls as a CSV file."""

from __future__ import annotations

import csv
from zoneinfo import ZoneInfo

from django.conf import settings
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse

from accounts.models import Account
from billing.money import money_str
from console import queries
from console.forms import UsageFilterForm
from console.views.base import ConsoleView


class UsageView(ConsoleView):
    """The account's calls, filtered, 50 a page; `?format=csv` streams every matching call as CSV."""

    section = "usage"

    def get(self, request: HttpRequest) -> HttpResponse:
        choices = queries.usage_filter_choices_for_account(account=self.account)
        form = UsageFilterForm(request.GET or None, choices=choices)
        if form.is_bound and not form.is_valid():
            return self.render("console/usage.html", {"form": form, "page": None}, status=400)
        data = form.cleaned_data if form.is_bound else {}
        filters = queries.UsageFilters(
            credential=data.get("key") or "",
            model_id=data.get("model") or "",
            status=data.get("status") or "",
            first_day=data.get("first_day"),
            last_day=data.get("last_day"),
        )
        records = queries.usage_records_for_account(account=self.account, filters=filters)
        if request.GET.get("format") == "csv":
            return self._csv(records)
        page = Paginator(records, queries.USAGE_PAGE_SIZE).get_page(request.GET.get("page"))
        rows = queries.usage_rows(account=self.account, records=page.object_list)
        query = request.GET.copy()
        query.pop("page", None)
        query.pop("format", None)
        return self.render(
            "console/usage.html",
            {"form": form, "page": page, "rows": rows, "query": query.urlencode()},
        )

    def _csv(self, records) -> StreamingHttpResponse:
        response = StreamingHttpResponse(
            usage_csv_lines(account=self.account, records=records), content_type="text/csv; charset=utf-8"
        )
        response["Content-Disposition"] = 'attachment; filename="usage.csv"'
        return response


class _Echo:
    """A file-like object whose write returns the line: csv.writer formats, the response streams."""

    def write(self, value: str) -> str:
        return value


USAGE_CSV_HEADER = (
    "time",
    "request_id",
    "key",
    "model",
    "endpoint",
    "status",
    "error_code",
    "input_tokens",
    "cached_tokens",
    "cache_write_tokens",
    "output_tokens",
    "amount",
    "billing",
)


def _csv_text(value: str) -> str:
    """Text a caller chose (a key's label, a model name, a request id) as a spreadsheet cell: one that
    starts like a formula is quoted, so opening the file never runs it (CWE-1236)."""
    return "'" + value if value[:1] in ("=", "+", "-", "@", "\t", "\r") else value


def usage_csv_lines(*, account: Account, records):
    """The CSV of the usage page: times in GATEWAY_TIMEZONE (ISO 8601), amounts as exact decimal
    strings (money_str), token counts empty for image calls."""
    writer = csv.writer(_Echo())
    zone = ZoneInfo(settings.GATEWAY_TIMEZONE)
    yield writer.writerow(USAGE_CSV_HEADER)
    names = queries.credential_names_for_account(account=account)
    for record in records.iterator(chunk_size=500):
        row = queries.usage_row(record=record, names=names)
        record = row.record
        tokens = (record.input_tokens, record.cached_tokens, record.cache_write_tokens, record.output_tokens)
        yield writer.writerow(
            (
                record.created_at.astimezone(zone).isoformat(),
                _csv_text(record.request_id),
                _csv_text(row.via),
                _csv_text(record.model_id),
                record.endpoint,
                record.status,
                record.error_code,
                *("" if count is None else count for count in tokens),
                money_str(record.amount),
                record.billing,
            )
        )
