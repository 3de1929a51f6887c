"""What the image and the chat playgrounds share: the credential the console calls with, and a
call's refusal, or a stored error answer, in words for people."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from accounts.models import Account
from accounts.snapshots import AccountSnapshot
from api.answers import CallAnswer
from core.errors import ApiError
from groups.snapshots import GroupSnapshot
from keys.credentials import Credential


def console_credential(*, account: Account, group: Any) -> Credential:
    """The console acts as the signed-in account, in the group of the model chosen."""
    return Credential(
        kind="console",
        id=account.pk,
        account=AccountSnapshot.from_model(account),
        bound_group=GroupSnapshot.from_model(group),
        label="console",
    )


@dataclass(frozen=True)
class PlainError:
    headline: str
    detail: str


def plain_error(error: ApiError, *, provider: str = "image provider") -> PlainError:
    """A gateway refusal in words for people; the gateway's own message says what exactly."""
    if error.type == "billing_error" or error.status == 402:
        headline = "Your balance or plan does not cover this call. Nothing was charged."
    elif error.status == 429:
        headline = "Too many calls, or a usage cap was reached. Nothing was charged; try again later."
    elif error.status in (401, 403):
        headline = "Your account may not make this call."
    elif error.status == 404:
        headline = "That model is not available."
    elif error.status >= 500:
        headline = f"The {provider} did not deliver. Nothing was charged; try again in a moment."
    else:
        headline = "The gateway could not accept this request. Nothing was charged."
    return PlainError(headline=headline, detail=error.message)


def answer_error(answer: CallAnswer) -> PlainError:
    """A stored error answer (a charged call whose answer was lost) in words."""
    return PlainError(
        headline="This form's call was made and charged, but its answer could not be shown.",
        detail=answer.error_message,
    )


def form_errors(form: Any) -> str:
    """A form's errors on one line, for an answer the page's script shows."""
    return " ".join(f"{field}: {' '.join(errors)}" for field, errors in form.errors.items())
