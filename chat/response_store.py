"""What the gateway keeps of the `/v1/responses` answers it translated, so that later calls can go on
from them as OpenAI's Responses API allows.

OpenAI stores a response unless the caller sends `store: false`. A later call may then continue its
conversation by `previous_response_id` (the OpenAI Agents SDK's `auto_previous_response_id`,
LangChain's `use_previous_response_id`), or name any of its output items by reference (`{"type":
"item_reference", "id": "msg_…"}`), which the Vercel AI SDK does by default. An upstream that speaks
another API stores nothing, so the gateway keeps each answer it translated for the account that asked
(a stream's once it completed): the call's own input, its references resolved, and its output items.
Before a call is translated, each referenced item takes its reference's place and the conversation
`previous_response_id` names goes before the call's input: each earlier response's input, then its
output, oldest first (not their `instructions`, as OpenAI does). The caller may retrieve a kept
response or delete it (GET and DELETE /v1/responses/{id}). A call served by OpenAI's own Responses
API is sent as it came: OpenAI keeps those.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Exists, OuterRef, Prefetch, QuerySet
from django.db.models.fields.json import KT
from django.utils import timezone

from billing.usage import text_storable
from chat.models import KeptResponse, ResponseItem
from core.errors import InvalidRequest, NotFound
from core.modelutils import queryset_delete_in_batches
from translators import ResponsesAnswer

# How deep a kept call's body may nest: a client's items nest a few levels (item, content, part,
# image), a tool's schema a few more; the database's JSON encoder recurses, and a body may nest as
# deep as the parser allows.
KEPT_DEPTH = 64
PREVIOUS_NOT_FOUND = "previous_response_not_found"


class PreviousResponseNotKept(InvalidRequest):
    """A `previous_response_id` naming no response the gateway keeps for the account."""

    code = PREVIOUS_NOT_FOUND


class ItemNotKept(NotFound):
    """An `item_reference` naming no item the gateway keeps for the account."""


@dataclass(frozen=True)
class ResponseThread:
    """A translated Responses call as the gateway goes on from what it kept: `body` is what is
    translated (the conversation before it and each referenced item in place); keeping its answer
    takes the account, the call's own `input` as kept (its references resolved), the response it
    continues (`previous`) and whether the caller asked for it to be kept (`stored`). `continues`:
    the call names responses or items the gateway kept, which only a translated upstream is sent."""

    account_id: int
    body: dict[str, Any]
    input: list[Any]
    previous: KeptResponse | None
    stored: bool
    continues: bool = False


def response_thread_resolve(
    *, account_id: int, body: dict[str, Any], kept_elsewhere: bool = False
) -> ResponseThread | None:
    """The call's thread: 400 for a `previous_response_id` that is not a string or names no response
    kept for the account (or one whose conversation is no longer all kept), 404 naming the first
    `item_reference` to an item not kept, 400 naming the field for a body to be kept that nests
    deeper than KEPT_DEPTH. With `kept_elsewhere` (some upstream of the model keeps its own answers:
    OpenAI's Responses API), a response or item the gateway does not keep is theirs: None, not a
    refusal."""
    try:
        return _thread(account_id=account_id, body=body)
    except (PreviousResponseNotKept, ItemNotKept):
        if kept_elsewhere:
            return None
        raise


def _thread(*, account_id: int, body: dict[str, Any]) -> ResponseThread:
    stored = body.get("store") is not False and settings.GATEWAY_RESPONSE_ITEMS_RETENTION_DAYS > 0
    given = body.get("input")
    if given is not None and not isinstance(given, (str, list)):  # what the translator refuses
        return ResponseThread(account_id=account_id, body=body, input=[], previous=None, stored=False)
    asked = body
    if not stored and body.get("store") is not False:  # the operator keeps none: the answer says so
        body = {**body, "store": False}
    if isinstance(given, str):
        own: list[Any] = [{"role": "user", "content": given}]
    else:
        own = _references_resolved(account_id=account_id, items=given or [])
    previous_id = body.get("previous_response_id")
    previous = None
    if previous_id is not None:
        if not isinstance(previous_id, str):
            raise InvalidRequest(
                "`previous_response_id` is the id of an earlier response.", param="previous_response_id"
            )
        previous, earlier = _conversation(account_id=account_id, response_id=previous_id)
        body = {**body, "input": [*earlier, *own]}
    elif isinstance(given, list) and own is not given:
        body = {**body, "input": own}
    if stored:  # once what it names is found: a call naming what others keep is theirs, not kept here
        _depth_check(asked)
    return ResponseThread(
        account_id=account_id,
        body=body,
        input=_storable(own) if stored else [],
        previous=previous,
        stored=stored,
        continues=previous is not None or (isinstance(given, list) and own is not given),
    )


def _references_resolved(*, account_id: int, items: list[Any]) -> list[Any]:
    """`items` with each `item_reference` replaced by the item kept for the account (`items` itself
    when it has none); 404 naming the first reference to an item not kept."""
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
        return items
    wanted = {item_id for item_id in named.values() if "\x00" not in item_id}  # no text column holds NUL
    kept = dict(
        ResponseItem.objects.filter(account_id=account_id, item_id__in=wanted).values_list("item_id", "item")
    )
    for position, item_id in named.items():
        if item_id not in kept:
            raise ItemNotKept(
                f"Item with id {item_id!r} not found: {_keeping()}.", param=f"input[{position}]"
            )
    return [kept[named[position]] if position in named else item for position, item in enumerate(items)]


def _conversation(*, account_id: int, response_id: str) -> tuple[KeptResponse, list[Any]]:
    """The response `response_id` names and its conversation's items up to it, oldest first: the
    responses of its conversation no deeper than it, read at once, then followed back by their
    `previous_response_id`s."""
    named = _kept(account_id=account_id, response_id=response_id)
    conversation = KeptResponse.objects.filter(
        account_id=account_id, root_id=named.values("root_id")[:1], depth__lte=named.values("depth")[:1]
    ).prefetch_related(Prefetch("items", queryset=ResponseItem.objects.order_by("position")))
    responses = {response.response_id: response for response in conversation}
    previous = responses.get(response_id)
    if previous is None:
        raise PreviousResponseNotKept(
            f"Previous response with id {response_id!r} not found: {_keeping()}.",
            param="previous_response_id",
        )
    turns = [previous]
    while turns[-1].previous_response_id:
        before = responses.get(turns[-1].previous_response_id)
        if before is None or before.depth != turns[-1].depth - 1:
            raise InvalidRequest(
                f"Previous response with id {response_id!r} continues a response no longer kept "
                f"({_keeping()}); send the whole conversation.",
                param="previous_response_id",
                code=PREVIOUS_NOT_FOUND,
            )
        turns.append(before)
    return previous, [
        item for turn in reversed(turns) for item in (*turn.input, *(kept.item for kept in turn.items.all()))
    ]


def _depth_check(body: dict[str, Any]) -> None:
    """400 naming the field of `body` that nests deeper than KEPT_DEPTH (iterative)."""
    pending: list[tuple[Any, int, str]] = [(value, 1, field) for field, value in body.items()]
    while pending:
        value, depth, field = pending.pop()
        if depth > KEPT_DEPTH:
            raise InvalidRequest(
                f"`{field}` nests deeper than the {KEPT_DEPTH} levels a kept response may; send "
                "`store: false`.",
                param=field,
            )
        if isinstance(value, dict):
            pending.extend((item, depth + 1, field) for item in value.values())
        elif isinstance(value, list):
            pending.extend((item, depth + 1, field) for item in value)


def _storable(value: Any) -> Any:
    """A copy of `value` with each character a database's text cannot hold (NUL; an upstream's text
    may hold half of a surrogate pair) made U+FFFD, in its keys and strings (iterative)."""
    top: list[Any] = [None]
    pending: list[tuple[Any, Any, Any]] = [(value, top, 0)]  # a value, and where its copy goes
    while pending:
        value, into, at = pending.pop()
        if isinstance(value, str):
            into[at] = text_storable(value)
        elif isinstance(value, dict):
            copy: dict[str, Any] = {}
            into[at] = copy
            for key, item in value.items():
                key = text_storable(key)
                copy[key] = None  # in the order given
                pending.append((item, copy, key))
        elif isinstance(value, list):
            listed: list[Any] = [None] * len(value)
            into[at] = listed
            pending.extend((item, listed, index) for index, item in enumerate(value))
        else:
            into[at] = value
    return top[0]


def response_keep(*, thread: ResponseThread, answer: ResponsesAnswer | None) -> None:
    """Keep the answer (its id, the call's input, its response object and output items) for the
    thread's account, when the caller asked for it to be kept."""
    if not thread.stored or answer is None:
        return
    previous = thread.previous
    with transaction.atomic():
        kept = KeptResponse.objects.create(
            account_id=thread.account_id,
            response_id=answer.response_id,
            previous_response_id=previous.response_id if previous else "",
            root_id=previous.root_id if previous else answer.response_id,
            depth=previous.depth + 1 if previous else 0,
            input=thread.input,
            response=_storable({**(answer.response or {}), "output": []}),
        )
        ResponseItem.objects.bulk_create(
            [
                ResponseItem(
                    account_id=thread.account_id,
                    response=kept,
                    position=position,
                    item_id=item["id"],
                    item=_storable(item),
                )
                for position, item in enumerate(answer.items)
                if isinstance(item.get("id"), str)
            ],
            ignore_conflicts=True,  # an id already kept keeps its first item
        )


def kept_response_get(*, account_id: int, response_id: str) -> dict[str, Any]:
    """The response kept for the account as its caller got it, output included; 404 otherwise."""
    kept = (
        _kept(account_id=account_id, response_id=response_id)
        .prefetch_related(Prefetch("items", queryset=ResponseItem.objects.order_by("position")))
        .first()
    )
    if kept is None:
        raise _response_not_found(response_id)
    return {**kept.response, "output": [item.item for item in kept.items.all()]}


def kept_response_delete(*, account_id: int, response_id: str) -> None:
    """Delete the response kept for the account, and its items; 404 when there is none. A later
    response continuing it can no longer be continued."""
    deleted, _ = _kept(account_id=account_id, response_id=response_id).delete()
    if not deleted:
        raise _response_not_found(response_id)


@dataclass(frozen=True)
class KeptResponseRow:
    """A kept response as the console lists it: its id, model, when, its turn in its conversation
    (1 for a first response) and how many output items it has."""

    response_id: str
    model: str
    created_at: datetime
    turn: int
    items: int


def kept_responses_recent(*, account_id: int, limit: int) -> tuple[list[KeptResponseRow], int]:
    """The account's `limit` latest kept responses, and how many it has in all."""
    kept = KeptResponse.objects.filter(account_id=account_id)
    rows = (
        kept.order_by("-created_at", "-id")
        .annotate(model=KT("response__model"), item_count=Count("items"))
        .values_list("response_id", "model", "created_at", "depth", "item_count")[:limit]
    )
    return [
        KeptResponseRow(
            response_id=response_id, model=model or "", created_at=at, turn=depth + 1, items=items
        )
        for response_id, model, at, depth, items in rows
    ], kept.count()


def kept_responses_delete_all(*, account_id: int) -> int:
    """Delete every response and item kept for the account, in batches. Returns how many responses."""
    kept = KeptResponse.objects.filter(account_id=account_id)
    count = kept.count()
    queryset_delete_in_batches(kept, batch_size=5000)
    queryset_delete_in_batches(ResponseItem.objects.filter(account_id=account_id), batch_size=5000)
    return count


def _kept(*, account_id: int, response_id: str) -> QuerySet[KeptResponse]:
    if "\x00" in response_id:  # no text column holds NUL
        return KeptResponse.objects.none()
    return KeptResponse.objects.filter(account_id=account_id, response_id=response_id)


def _response_not_found(response_id: str) -> NotFound:
    return NotFound(
        f"Response with id {response_id!r} not found: the gateway keeps the responses of the models it "
        f"translates ({_keeping()}); one OpenAI served itself is kept by OpenAI.",
        param="response_id",
    )


def _keeping() -> str:
    """What the gateway keeps, for the caller told that something is not kept."""
    days = settings.GATEWAY_RESPONSE_ITEMS_RETENTION_DAYS
    if days == 0:
        return "this gateway keeps no response (GATEWAY_RESPONSE_ITEMS_RETENTION_DAYS is 0)"
    return (
        f"a response and its items are kept {days} days after its conversation's last response, unless "
        "it was made with `store: false`"
    )


def response_store_purge(
    *, older_than_days: int | None = None, now: datetime | None = None, batch_size: int = 5000
) -> int:
    """Delete the conversations whose last response is older than GATEWAY_RESPONSE_ITEMS_RETENTION_DAYS
    (or `older_than_days`), every response of each with its items, in batches; a conversation still
    being continued keeps its first turns, without which it could not go on. Items kept before their
    responses were go by their own age. Returns how many rows were deleted."""
    days = older_than_days if older_than_days is not None else settings.GATEWAY_RESPONSE_ITEMS_RETENTION_DAYS
    cutoff = (now or timezone.now()) - timedelta(days=days)
    newer_in_conversation = KeptResponse.objects.filter(
        account=OuterRef("account"), root_id=OuterRef("root_id"), created_at__gte=cutoff
    )
    stale = KeptResponse.objects.filter(created_at__lt=cutoff).exclude(Exists(newer_in_conversation))
    unlinked = ResponseItem.objects.filter(response__isnull=True, created_at__lt=cutoff)
    return queryset_delete_in_batches(stale, batch_size=batch_size) + queryset_delete_in_batches(
        unlinked, batch_size=batch_size
    )
