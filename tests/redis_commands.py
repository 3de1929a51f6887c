"""What the Redis server received: `redis_commands()` records the commands sent to the test database
(REDIS_URL's) while its block runs, through Redis's MONITOR."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

from django.conf import settings


class RedisCommands:
    """The commands the Redis server received for this test's database while the block ran."""

    def __init__(self) -> None:
        self.commands: list[str] = []

    def circuit(self) -> list[str]:
        return [command for command in self.commands if ":circuit:" in command]

    def naming(self, key: str) -> list[str]:
        """The commands that name `key` (a full key, as the cache stores it)."""
        return [command for command in self.commands if key in command]


@contextmanager
def redis_commands() -> Iterator[RedisCommands]:
    import redis

    url = settings.REDIS_URL
    db = int(urlsplit(url).path.lstrip("/") or 0)
    seen = RedisCommands()
    monitor = redis.Redis.from_url(url).monitor()
    monitor.__enter__()  # from here the server copies every command to this connection
    try:
        yield seen
        # A sentinel marks the end: everything before it in the monitor's stream belongs to the block.
        sentinel = f"monitor-end-{uuid.uuid4().hex}"
        redis.Redis.from_url(url).get(sentinel)
        for entry in monitor.listen():
            if sentinel in entry["command"]:
                break
            if entry["db"] == db:
                seen.commands.append(entry["command"])
    finally:
        monitor.__exit__(None, None, None)
