from __future__ import annotations

from core.modelutils import model_upsert
from groups.models import Group


def group_upsert(
    *,
    group_id: int,
    name: str,
    status: str,
    image_enabled: bool,
    billing: str,
    allow_group_override: bool,
    rpm: int,
    concurrency: int,
    tpm: int = 0,
) -> tuple[Group, str]:
    return model_upsert(
        Group,
        lookup={"id": group_id},
        values={
            "name": name,
            "status": status,
            "image_enabled": image_enabled,
            "billing": billing,
            "allow_group_override": allow_group_override,
            "rpm": rpm,
            "tpm": tpm,
            "concurrency": concurrency,
        },
    )
