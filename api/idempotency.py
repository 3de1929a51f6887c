"""Idempotency keys over HTTP: billing.idempotency keeps a call's answer as plain data and decides
when it is run or replayed; this module gives it the HTTP answer to keep and gives back the kept one
as the HTTP answer, marked `Idempotent-Replayed: true` when it is the first answer given again."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from datetime import datetime

from accounts.models import Account
from api.answers import REPLAY_HEADER, StoredResponse
from billing.idempotency import KeptAnswer, idempotency_fingerprint, idempotent_execute
from core.errors import ApiError, compatible_body

ANSWER_LOST_CODE = "idempotent_answer_lost"


def answer_lost() -> StoredResponse:
    """What a key whose call was charged but failed afterwards answers its retries (replayed, with
    Idempotent-Replayed: true): 500, the call is not made again and not charged again."""
    error = ApiError(
        "The first request with this Idempotency-Key was completed and charged, but its answer could "
        "not be delivered. It is not run again; use a new Idempotency-Key to make a new call.",
        status=500,
        type="api_error",
        code=ANSWER_LOST_CODE,
    )
    return StoredResponse(
        status=500,
        body=json.dumps(compatible_body(error, request_id=None)).encode(),
        content_type="application/json",
    )


def request_fingerprint(*, path: str, group_id: int, content: Iterable[bytes]) -> str:
    """What makes two /v1 requests "the same" for an Idempotency-Key, for every family: the endpoint,
    the group it is billed to, and the parts of the request's content as the family reads them, in a
    fixed order."""
    return idempotency_fingerprint(parts=(path.encode(), str(group_id).encode(), *content))


def idempotent_answer(
    *,
    account: Account,
    key: str | None,
    fingerprint: str,
    produce: Callable[[], StoredResponse],
    reference: str = "",
    now: datetime | None = None,
    in_transaction: bool = False,
) -> StoredResponse:
    """`produce`'s answer, run at most once per (account, key) while the key lives
    (billing.idempotency.idempotent_execute says how); a replay carries `Idempotent-Replayed: true`."""

    def kept() -> KeptAnswer:
        return _kept(produce())

    answer = idempotent_execute(
        account=account,
        key=key,
        fingerprint=fingerprint,
        produce=kept,
        answer_lost=_kept(answer_lost()),
        reference=reference,
        now=now,
        in_transaction=in_transaction,
    )
    headers = dict(answer.headers)
    if answer.replayed:
        headers[REPLAY_HEADER] = "true"
    return StoredResponse(
        status=answer.status, body=answer.body, content_type=answer.content_type, headers=headers
    )


def _kept(response: StoredResponse) -> KeptAnswer:
    return KeptAnswer(
        status=response.status,
        body=response.body,
        content_type=response.content_type,
        headers=dict(response.headers),
    )
