"""What a call reads of an upstream: an immutable snapshot, shared by every thread of a process through
the configuration cache (upstreams/routing.py)."""

from __future__ import annotations

from dataclasses import dataclass

from upstreams.models import Upstream


@dataclass(frozen=True, slots=True)
class UpstreamSnapshot:
    """An upstream's row as read at one configuration generation (retry and circuit fields: None =
    the GATEWAY_RETRY defaults)."""

    id: int
    name: str
    kind: str
    base_url: str
    api_key_env: str
    timeout_seconds: int
    priority: int
    weight: int
    max_retries: int | None
    retry_base_seconds: float | None
    retry_max_wait_seconds: float | None
    retry_deadline_seconds: float | None
    circuit_threshold: int | None
    circuit_cooldown_seconds: float | None

    @property
    def pk(self) -> int:
        return self.id

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"

    @classmethod
    def from_model(cls, upstream: Upstream) -> UpstreamSnapshot:
        return cls(
            id=upstream.pk,
            name=upstream.name,
            kind=str(upstream.kind),
            base_url=upstream.base_url,
            api_key_env=upstream.api_key_env,
            timeout_seconds=upstream.timeout_seconds,
            priority=upstream.priority,
            weight=upstream.weight,
            max_retries=upstream.max_retries,
            retry_base_seconds=upstream.retry_base_seconds,
            retry_max_wait_seconds=upstream.retry_max_wait_seconds,
            retry_deadline_seconds=upstream.retry_deadline_seconds,
            circuit_threshold=upstream.circuit_threshold,
            circuit_cooldown_seconds=upstream.circuit_cooldown_seconds,
        )
