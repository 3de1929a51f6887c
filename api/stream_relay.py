"""One shape for every family's streamed answer (images/streaming.py, chat/streaming.py): the family's
relay yields the answer's bytes, and `stream_settled` makes it the answer's body, which settles the
call exactly once however the stream ends:

- the relay charges when its final event has arrived (`StreamSettlement.charge`);
- the caller leaves (the server closes the body): the family's rule for a caller who left runs
  (`caller_gone`), and `StreamSettlement.left` records the call as complete or as
  `client_closed_request`;
- an ApiError, a domain error or an UpstreamError: the hold is released, the usage record says why,
  and the family's error event ends the answer;
- anything else: the same, logged, as the gateway's internal error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from decimal import Decimal

from api.errors import api_error_for
from api.metering import MeteredCall
from core.errors import ApiError, DomainError, InternalError
from upstreams.errors import UpstreamError

logger = logging.getLogger("gateway.stream")


def stream_owned_close(owned: ExitStack, failure: BaseException | None) -> None:
    """Close what a streamed call owns (its usage scope and reservation), for every family: as a
    success, or with the failure that ended the stream, so that the usage record says how it ended."""
    if failure is None:
        owned.close()
    else:
        owned.__exit__(type(failure), failure, failure.__traceback__)


def stream_client_gone() -> ApiError:
    """The error a stream's usage record gets when the caller left before its end."""
    return ApiError(
        "The client closed the stream before it was complete.",
        status=499,
        type="invalid_request_error",
        code="client_closed_request",
    )


class StreamSettlement:
    """A streamed call's reservation and usage scope (`owned`), settled once: charged, released or
    left. `before_close(failure)`, when given, runs first when the call ends (the family's own
    resources: a text stream's upstream reply)."""

    __slots__ = ("_before_close", "finished", "meter", "owned")

    def __init__(
        self,
        *,
        owned: ExitStack,
        meter: MeteredCall,
        before_close: Callable[[BaseException | None], None] | None = None,
    ) -> None:
        self.owned = owned
        self.meter = meter
        self._before_close = before_close
        self.finished = False

    @property
    def resolved(self) -> bool:
        """The hold has been charged or released."""
        return self.meter.resolved

    def charge(self, amount: Decimal | None = None) -> None:
        """Capture `amount` (None: the whole hold) and end the call as a success, before the caller
        sees the answer's end, so that whoever reads the account after the stream sees the charge."""
        self.meter.capture(amount=amount)
        self.finish(None)

    def fail(self, failure: BaseException) -> None:
        """Release the hold and end the call with `failure`."""
        self.meter.release()
        self.finish(failure)

    def left(self, *, complete: bool) -> None:
        """End the call of a caller who left: a success if its stream was `complete`, else
        `client_closed_request`."""
        self.finish(None if complete else stream_client_gone())

    def finish(self, failure: BaseException | None) -> None:
        if self.finished:
            return
        self.finished = True
        if self._before_close is not None:
            self._before_close(failure)
        stream_owned_close(self.owned, failure)


def stream_settled(
    body: Iterator[bytes],
    *,
    settlement: StreamSettlement,
    request_id: str,
    caller_gone: Callable[[], None],
    converted: Callable[[UpstreamError], ApiError],
    error_event: Callable[[ApiError], bytes],
) -> Iterator[bytes]:
    """The answer's body: `body`'s bytes, the call settled however they end. `caller_gone` is the
    family's rule for a caller who left; `converted` turns an upstream failure into the caller's
    error; `error_event(error)` is the last bytes of a failed stream."""
    try:
        yield from body
    except GeneratorExit:
        caller_gone()
        raise
    except (ApiError, DomainError, UpstreamError) as exc:
        settlement.meter.release()
        if isinstance(exc, UpstreamError):
            error = converted(exc)
        else:
            error = exc if isinstance(exc, ApiError) else api_error_for(exc)
        settlement.finish(error)
        yield error_event(error)
    except Exception as exc:
        logger.exception("stream of request %s failed", request_id)
        settlement.fail(exc)
        yield error_event(InternalError("The stream failed inside the gateway; it has been logged."))
    finally:
        settlement.finish(None)  # no-op unless a path above did not settle
