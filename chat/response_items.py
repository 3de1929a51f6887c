"""The output items of translated `/v1/responses` answers, kept so that a later call can name them.

OpenAI's Responses API stores a response unless the caller sends `store: false`, and a later call may
then name any of its output items by reference (`{"type": "item_reference", "id": "msg_…"}`) instead
of sending it again: the Vercel AI SDK does so by default, for the assistant's earlier text and its
reasoning. An upstream that speaks another API stores nothing, so the gateway keeps the items of the
answers it translated for the account that asked (a stream's once it completed), and puts each item
back in place of its reference before the call is translated. A call served by OpenAI's own
Responses API is sent as it came, references included: OpenAI keeps those items.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from billing.usage import text_storable
from chat.models import ResponseItem
from core.errors import InvalidRequest, NotFound
from core.modelutils import queryset_delete_in_batches


def response_items_asked(*, body: Mapping[str, Any]) -> bool:
    """Whether the caller's Responses body asks for its answer to be kept (`store` is not false)."""
    return body.get("store") is not False


def response_items_keep(*, account_id: int, items: Sequence[Mapping[str, Any]]) -> None:
    """Keep the answer's output items for the account, by their ids."""
    ResponseItem.objects.bulk_create(
        [
            ResponseItem(account_id=account_id, item_id=item["id"], item=_storable(item))
            for item in items
            if isinstance(item.get("id"), str)
        ],
        ignore_conflicts=True,  # an id already kept keeps its first item
    )


def _storable(value: Any) -> Any:
    """The item with each character a database's text cannot hold (an upstream's text may: NUL, half
    of a surrogate pair) made U+FFFD, in its keys and strings. A translator's items are shallow."""
    if isinstance(value, str):
        return text_storable(value)
    if isinstance(value, dict):
        return {text_storable(key): _storable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_storable(item) for item in value]
    return value


def response_items_resolved(*, account_id: int, body: dict[str, Any]) -> dict[str, Any]:
    """The body with each `item_reference` in its `input` replaced by the item kept for the account
    (the body itself when it has none); 404 naming the first reference to an item not kept."""
    items = body.get("input")
    if not isinstance(items, list):
        return body
    named: dict[int, str] = {}
    for position, item in enumerate(items):
        if isinstance(item, dict) and item.get("type") == "item_reference":
            item_id = item.get("id")
            if not isinstance(item_id, str):
                raise InvalidRequest(
                    "`id` of an item_reference is the id of an item of an earlier response.",
                    param=f"input[{position}].id",
                )
            named[position] = item_id
    if not named:
        return body
    wanted = {item_id for item_id in named.values() if "\x00" not in item_id}  # no text column holds NUL
    kept = dict(
        ResponseItem.objects.filter(account_id=account_id, item_id__in=wanted).values_list("item_id", "item")
    )
    for position, item_id in named.items():
        if item_id not in kept:
            raise NotFound(
                f"Item with id {item_id!r} not found: an item is kept for "
                f"{settings.GATEWAY_RESPONSE_ITEMS_RETENTION_DAYS} days after a response with `store` "
                "not false.",
                param=f"input[{position}]",
            )
    return {
        **body,
        "input": [
            kept[named[position]] if position in named else item for position, item in enumerate(items)
        ],
    }


def response_items_purge(
    *, older_than_days: int | None = None, now: datetime | None = None, batch_size: int = 5000
) -> int:
    """Delete the items kept longer than GATEWAY_RESPONSE_ITEMS_RETENTION_DAYS (or `older_than_days`),
    in batches. Returns how many were deleted."""
    days = older_than_days if older_than_days is not None else settings.GATEWAY_RESPONSE_ITEMS_RETENTION_DAYS
    cutoff = (now or timezone.now()) - timedelta(days=days)
    return queryset_delete_in_batches(
        ResponseItem.objects.filter(created_at__lt=cutoff), batch_size=batch_size
    )
