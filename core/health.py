"""What a load balancer asks before it sends a process calls: is the process up (liveness), and can
it serve (readiness: PostgreSQL answers, Redis answers when REDIS_URL is set, every migration is
applied).

Cheap enough to ask every second: one `SELECT 1`, one Redis PING, and the migration check only until
it has passed once in this process (migrations are applied before a deploy starts its processes;
loading the migration graph costs tens of milliseconds, too much per probe). A check that fails says
why; nothing here raises.
"""

from __future__ import annotations

import logging

import redis
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor

from core.redis_pool import ProcessConnectionPool

logger = logging.getLogger("gateway.health")

# (passed, what to say). A check catches whatever its dependency raises (a refused connection, a
# driver's own errors): the probe answers 503 naming it, never 500.
CheckResult = tuple[bool, str]

_migrations_applied = False  # once True, stays True for the life of the process
_last_failures: dict[str, str] = {}  # what each check last logged, so an outage is logged once


def database_check(alias: str = DEFAULT_DB_ALIAS) -> CheckResult:
    """One `SELECT 1` on the database; the connection goes back to the pool when the request ends."""
    try:
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as error:
        return False, _describe("database", error)
    _last_failures.pop("database", None)
    return True, "ok"


def redis_check() -> CheckResult | None:
    """One PING on REDIS_URL with the cache's timeouts; None when Redis is not configured."""
    if not settings.REDIS_URL:
        return None
    try:
        _redis().ping()
    except Exception as error:
        return False, _describe("redis", error)
    _last_failures.pop("redis", None)
    return True, "ok"


def migrations_check(alias: str = DEFAULT_DB_ALIAS) -> CheckResult:
    """No migration of an installed app is unapplied on the database. Cached once it has passed."""
    global _migrations_applied
    if _migrations_applied:
        return True, "ok"
    try:
        executor = MigrationExecutor(connections[alias])
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except Exception as error:
        return False, _describe("migrations", error)
    if plan:
        names = ", ".join(f"{migration.app_label}.{migration.name}" for migration, _ in plan[:5])
        more = f" and {len(plan) - 5} more" if len(plan) > 5 else ""
        return False, f"{len(plan)} unapplied: {names}{more}"
    _migrations_applied = True
    return True, "ok"


def readiness_checks() -> dict[str, CheckResult]:
    """Every readiness check by name, in order; the migration check only when the database answered."""
    results: dict[str, CheckResult] = {"database": database_check()}
    redis_result = redis_check()
    if redis_result is not None:
        results["redis"] = redis_result
    if results["database"][0]:
        results["migrations"] = migrations_check()
    else:
        results["migrations"] = (False, "not checked: the database did not answer")
    return results


def _redis() -> redis.Redis:
    """A client on REDIS_URL with the cache's timeouts, over the process's shared pool for them
    (core/redis_pool.py; the cache's own in production): a probe keeps no client of its own."""
    options = settings.CACHES["default"].get("OPTIONS", {})
    return redis.Redis(
        connection_pool=ProcessConnectionPool.from_url(
            settings.REDIS_URL or "",  # redis_check asks only with REDIS_URL set
            socket_connect_timeout=options.get("socket_connect_timeout", 0.5),
            socket_timeout=options.get("socket_timeout", 1.0),
        )
    )


def _describe(check: str, error: BaseException) -> str:
    """The error's class for the (public) probe's body; its message to the log, once per change: a
    driver's message names hosts and ports, which an unauthenticated caller need not learn."""
    kind = type(error).__name__
    lines = str(error).strip().splitlines()
    detail = f"{kind}: {lines[0]}" if lines else kind
    if _last_failures.get(check) != detail:
        _last_failures[check] = detail
        logger.warning("readiness check %s failed: %s", check, detail)
    return kind
