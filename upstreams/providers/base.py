"""The adapter interface every upstream kind implements.

An adapter turns one operation's request into its result for one upstream, or raises `UpstreamError`,
which says whether retrying can help. Each kind declares the operations it serves (`operations`); the
registry (`upstreams.providers`) answers which kinds serve an operation, and asking an adapter for one
it does not serve is a non-retryable `UpstreamError`. Its HTTP calls go through `upstreams.transport`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from upstreams.errors import UpstreamError
from upstreams.transport import UpstreamReply, upstream_request

if TYPE_CHECKING:
    from upstreams.models import Upstream

__all__ = [
    "IMAGES_EDIT",
    "IMAGES_GENERATE",
    "IMAGES_STREAM",
    "Adapter",
    "ImageItem",
    "ImageRequest",
    "ImageResult",
    "StreamEvent",
    "UpstreamError",
    "stream_event_names",
]

# Operation names: "<family>.<action>". The text families will add theirs ("chat.completions",
# "responses", "messages", "messages.count_tokens") with the adapters that serve them.
IMAGES_GENERATE = "images.generate"
IMAGES_EDIT = "images.edit"
IMAGES_STREAM = "images.stream"


@dataclass(frozen=True)
class ImageRequest:
    operation: Literal["generate", "edit"]
    upstream_model: str
    prompt: str
    n: int = 1
    size: str | None = None
    output_format: str | None = None
    response_format: str = "b64_json"
    # Other validated, spec-listed fields (quality, style, background, output_compression, ...).
    options: dict[str, Any] = field(default_factory=dict)
    images: tuple[bytes, ...] = ()
    mask: bytes | None = None
    request_id: str = ""

    @property
    def upstream_operation(self) -> str:
        """The adapter operation that answers this request without streaming."""
        return IMAGES_GENERATE if self.operation == "generate" else IMAGES_EDIT


@dataclass(frozen=True)
class ImageItem:
    b64_json: str | None = None
    url: str | None = None
    revised_prompt: str | None = None


@dataclass(frozen=True)
class ImageResult:
    created: int
    items: tuple[ImageItem, ...]
    usage: dict[str, Any] | None = None


@dataclass(frozen=True)
class StreamEvent:
    """One server-sent event of a streamed image call, as the upstream sent it.

    `type` is e.g. "image_generation.partial_image" or "image_edit.completed"; `data` is the event's
    JSON object; `final` marks a completed image (the call is billed once every image completed)."""

    type: str
    data: dict[str, Any]
    final: bool = False


def stream_event_names(operation: str) -> tuple[str, str]:
    """(partial, completed) event types for an operation, as OpenAI's Images API names them."""
    prefix = "image_generation" if operation == "generate" else "image_edit"
    return f"{prefix}.partial_image", f"{prefix}.completed"


class Adapter:
    """Base class of the upstream adapters; one instance per upstream per call.

    A kind lists the operations it serves in `operations` and implements each: the image operations
    as `generate`, `edit` and `stream`; any other (a text family's) in `serve`, which `call` hands
    every operation not in `IMAGE_METHODS`.
    """

    kind: ClassVar[str]
    operations: ClassVar[frozenset[str]] = frozenset()
    IMAGE_METHODS: ClassVar[Mapping[str, str]] = {
        IMAGES_GENERATE: "generate",
        IMAGES_EDIT: "edit",
        IMAGES_STREAM: "stream",
    }

    def __init__(self, upstream: Upstream, *, deadline: float | None = None) -> None:
        self.upstream = upstream
        # Absolute time.monotonic() by which the whole call must end (set by the retry loop).
        self.deadline = deadline

    @classmethod
    def serves(cls, operation: str) -> bool:
        return operation in cls.operations

    def call(self, operation: str, request: Any) -> Any:
        """Run `operation` on this upstream; a non-retryable UpstreamError if the kind does not serve it."""
        self.operation_check(operation)
        method = self.IMAGE_METHODS.get(operation)
        if method is not None:
            return getattr(self, method)(request)
        return self.serve(operation, request)

    def image_call(self, request: ImageRequest) -> ImageResult:
        """Generate or edit, as the request says (not streamed)."""
        return self.call(request.upstream_operation, request)

    def operation_check(self, operation: str) -> None:
        if operation not in self.operations:
            raise UpstreamError(
                f"{self.kind} upstreams do not serve {operation}", status=None, retryable=False
            )

    def serve(self, operation: str, request: Any) -> Any:
        """The operations beyond the image ones; a kind that declares any implements them here."""
        self.operation_check(operation)
        raise NotImplementedError(f"{type(self).__name__} declares {operation} but does not serve it")

    def generate(self, request: ImageRequest) -> ImageResult:
        self.operation_check(IMAGES_GENERATE)
        raise NotImplementedError

    def edit(self, request: ImageRequest) -> ImageResult:
        self.operation_check(IMAGES_EDIT)
        raise NotImplementedError

    def stream(self, request: ImageRequest) -> Iterator[StreamEvent]:
        """Partial and completed images as they arrive; raises UpstreamError before or during the stream."""
        self.operation_check(IMAGES_STREAM)
        raise NotImplementedError

    def _request(self, method: str, url: str, **kwargs: Any) -> UpstreamReply:
        """An HTTP call to this upstream within the call's deadline (`upstreams.transport`)."""
        return upstream_request(
            upstream=self.upstream, method=method, url=url, deadline=self.deadline, **kwargs
        )
