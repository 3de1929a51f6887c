"""The PostgreSQL one-statement forms of the billing hot path, and how they are run.

Reserve, capture (with the call's usage record) and a wallet hold's release are each ONE statement
with data-modifying CTEs in autocommit: one round trip each, and no row lock is ever held across a
client round trip. SQLite has no DML inside WITH; there the services in billing/holds.py and
billing/subscriptions.py run the ORM form of each operation, with the same results.

Statements run on a server-side-binding cursor, so psycopg prepares them once per connection when
the connection's `prepare_threshold` (DATABASES OPTIONS, settings.DATABASE_PREPARED_STATEMENTS)
allows it; Django's own queries keep its client-side-binding cursor and are never prepared.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any, TypeVar

import psycopg
from django.db import DEFAULT_DB_ALIAS, InterfaceError, OperationalError, connection, connections, models
from django.db.backends.base.base import BaseDatabaseWrapper

from billing.models import Hold, KeyBudgetUsage, LedgerEntry, SubscriptionUsage, UsageRecord, Wallet
from billing.windows import WINDOW_ORDER
from core.db import database_reconnect, session_ended_before_statement

logger = logging.getLogger("gateway.billing")

M = TypeVar("M", bound=models.Model)


def on_postgresql() -> bool:
    """True where the hot path runs as the statements below; elsewhere (SQLite) it runs the ORM form."""
    return connection.vendor == "postgresql"


def sql_names(model: type[models.Model]) -> SimpleNamespace:
    """Quoted table and column names of a model for hand-written SQL: `.table`, and one attribute per
    concrete field under its attname (`.wallet_id`, `.held`, ...), so the SQL follows the models."""
    quote = connection.ops.quote_name
    # A concrete field always has a column; the stubs type `column` as optional for the others.
    names = {field.attname: quote(field.column) for field in model._meta.concrete_fields}  # type: ignore[arg-type]
    return SimpleNamespace(table=quote(model._meta.db_table), **names)


def statement_instance(model: type[M], values: dict[str, Any]) -> M:
    """A model instance for a row a statement has just written, from the values it wrote (by
    attname; the others are None), as a query would have loaded it: no second round trip."""
    fields = model._meta.concrete_fields
    return model.from_db(
        connection.alias, [field.attname for field in fields], [values.get(field.attname) for field in fields]
    )


def statement_run(sql: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
    """Run one billing statement and return its first row.

    A statement that meets a session PostgreSQL had ended (a restart: the pool's idle connections all
    died with it) did not run: it runs once more on a fresh connection, after the
    pool's idle connections are checked (`core.db.database_reconnect`). Not inside a transaction,
    whose work the new connection cannot continue.
    """
    try:
        return _statement_run(sql, params)
    except (OperationalError, InterfaceError) as exc:
        if not session_ended_before_statement(exc) or not database_reconnect():
            raise
        logger.warning("a billing statement met a connection PostgreSQL had ended; running it again")
        return _statement_run(sql, params)


def _statement_run(sql: str, params: dict[str, Any]) -> tuple[Any, ...] | None:
    """One run of a billing statement.

    Through Django's cursor wrapping (query logging, execute_wrappers, database error translation), on
    a server-side-binding cursor (`psycopg.Cursor`): psycopg prepares it per the connection's
    `prepare_threshold` (settings.DATABASE_PREPARED_STATEMENTS). The pool's connections
    (`gateway_project.database.StatementConnection`) keep that cursor for the next run of the same
    statement: a cursor run again keeps the dumpers it chose for the parameters' types. A connection is
    lent to one caller at a time, and its cursors with it."""
    # The connection of this thread (or greenlet), looked up once: every attribute read through the
    # `connection` proxy looks it up again.
    conn = connections[DEFAULT_DB_ALIAS]
    conn.validate_thread_sharing()
    logged = conn.queries_logged  # DEBUG, or a CaptureQueriesContext
    with _statement_connection(conn) as raw:
        # Django's query log shows a statement as its client-side-binding cursor sent it (values in
        # the text); psycopg keeps no such text for a prepared one. A logged statement therefore runs
        # on the connection's own (Django's) cursor, unprepared: same result.
        kept = None if logged else getattr(raw, "statement_cursors", None)
        raw_cursor = kept.get(sql) if kept is not None else None
        if raw_cursor is None or raw_cursor.closed:
            with conn.wrap_database_errors:
                raw_cursor = raw.cursor() if logged else psycopg.Cursor(raw)
            if kept is not None:
                kept[sql] = raw_cursor
        # Django's cursor wrappers around a psycopg cursor of its own (undocumented, docs/architecture.md):
        # the stubs type their argument as Django's wrapper.
        cursor = conn.make_debug_cursor(raw_cursor) if logged else conn.make_cursor(raw_cursor)  # type: ignore[arg-type]
        try:
            cursor.execute(sql, params)
            row: tuple[Any, ...] | None = cursor.fetchone()
            return row
        finally:
            if kept is None:
                cursor.close()


@contextmanager
def _statement_connection(conn: BaseDatabaseWrapper) -> Iterator[psycopg.Connection]:
    """The psycopg connection a statement runs on.

    With the connection pool, a call between statements holds no connection (api.metering gives it
    back): the statement then borrows one from Django's pool just for itself, without making it this
    thread's Django connection (Django's connect and close copy settings, check autocommit and the time
    zone and send a signal on every loan). Inside a transaction, or when the thread
    already holds a connection, it runs on that one, so that it sees and joins what the thread did.
    """
    if conn.connection is not None or conn.in_atomic_block or not conn.settings_dict["OPTIONS"].get("pool"):
        conn.close_if_health_check_failed()
        conn.ensure_connection()
        yield conn.connection
        return
    pool = conn.pool  # type: ignore[attr-defined]  # the PostgreSQL backend's, when OPTIONS has a pool
    with conn.wrap_database_errors:
        if pool.closed:
            pool.open()  # as Django's connect does: nothing has used the pool yet
        raw = pool.getconn()
    try:
        if not raw.autocommit:  # a connection Django has not used yet
            with conn.wrap_database_errors:
                raw.autocommit = True
        yield raw
    finally:
        # After a failure (a broken connection, an interrupted statement), the pool checks it.
        pool.putconn(raw)


@functools.cache
def hold_reserve_sql(*, own_transaction: bool) -> str:
    """Reserve as ONE statement: the conditional UPDATE of the wallet and the INSERT of the hold run
    inside the server, so the wallet's row lock is held only for the length of this statement, never
    across a client round trip (under load, a round trip in a busy process waits for the GIL for
    milliseconds, and every call of the account would queue behind the lock meanwhile).

    Conditional UPDATE, checked by the row it returns: a concurrent reserve waits for the row lock,
    then re-evaluates `balance >= held + amount` against the committed row (READ COMMITTED), so two
    calls can never both take the last money. No row returned: insufficient balance, nothing written.

    `own_transaction` (the statement is its own transaction, autocommit): it commits without waiting
    for the WAL flush (`synchronous_commit = off` for this transaction only). That is safe for a
    reservation and only for it: it moves no money, only `held` and an open hold. PostgreSQL writes
    WAL in order, so the capture (or release) that follows it, which commits synchronously, makes the
    reservation durable too; a crash can only lose a reservation nothing durable depends on yet, and
    such a call is then simply not charged. Inside a caller's transaction the setting would apply to
    that transaction's other writes: not used there.

    A lost reservation may also take its id with it: the id's sequence is made durable by the same
    WAL, so after such a crash PostgreSQL can give that id to another call's hold, while the call that
    lost it still holds it in memory. Capture and release therefore match a hold by its id AND its
    reference (the call's request id): the first call then finds no hold, is not charged, and leaves
    the other call's hold alone.
    """
    w, h = sql_names(Wallet), sql_names(Hold)
    no_flush_wait = (
        "no_flush_wait AS (SELECT set_config('synchronous_commit', 'off', true))," if own_transaction else ""
    )
    return f"""
        WITH {no_flush_wait}
        reserved AS (
            UPDATE {w.table} SET {w.held} = {w.held} + %(amount)s, {w.updated_at} = %(created_at)s
            WHERE {w.account_id} = %(account_id)s AND {w.balance} >= {w.held} + %(amount)s
            RETURNING {w.id} AS wallet_id
        )
        INSERT INTO {h.table} (
            {h.kind}, {h.wallet_id}, {h.amount}, {h.status}, {h.reference}, {h.owner}, {h.created_at},
            {h.expires_at}, {h.api_key_id}, {h.key_window}, {h.key_window_start}
        )
        SELECT %(kind)s, reserved.wallet_id, %(amount)s, %(status)s, %(reference)s, %(owner)s,
            %(created_at)s, %(expires_at)s, %(api_key_id)s, %(key_window)s, %(key_window_start)s
        FROM reserved{" CROSS JOIN no_flush_wait" if own_transaction else ""}
        RETURNING {h.id}, {h.wallet_id}
    """  # noqa: S608 - identifiers from the models' _meta, values bound as parameters


def _key_counted_cte(*, after: str) -> str:
    """The CTE `key_counted`: the call's amount counted in its key's budget window, an upsert as a
    subscription window's (created at `amount` on the window's first call, else raised with the
    conditional `used + amount <= budget`, evaluated on the locked, committed row). It runs only once
    `after` (the wallet's or the last subscription window's CTE) has returned its row: that data
    dependency takes the locks in one order, the wallet (or the subscription's counters) before the
    key's, as capture and release take them too, so they cannot deadlock."""
    k = sql_names(KeyBudgetUsage)
    key = f"{k.api_key_id}, {k.window}, {k.window_start}"
    return f"""
        key_counted AS (
            INSERT INTO {k.table} AS counter ({key}, {k.used}, {k.updated_at})
            SELECT %(api_key_id)s, %(key_window)s, %(key_window_start)s, %(amount)s, %(key_updated_at)s
            WHERE EXISTS (SELECT FROM {after}) AND %(amount)s <= %(key_budget)s
            ON CONFLICT ({key}) DO UPDATE SET {k.used} = counter.{k.used} + EXCLUDED.{k.used},
                {k.updated_at} = EXCLUDED.{k.updated_at}
            WHERE counter.{k.used} + EXCLUDED.{k.used} <= %(key_budget)s
            RETURNING 1
        )"""  # noqa: S608 - identifiers from the models' _meta, values bound as parameters


@functools.cache
def hold_reserve_keyed_sql() -> str:
    """Reserve a call on an API key with a budget as ONE statement, run in a transaction: the wallet's
    conditional UPDATE (as `hold_reserve_sql`), then the key's window (`_key_counted_cte`), then the
    hold, written only when both counted and naming the key's window. A refusal by the key's window
    after the wallet reserved is rolled back by the transaction. The result: whether the wallet
    reserved, then the hold's id and wallet id (NULL when refused)."""
    w, h = sql_names(Wallet), sql_names(Hold)
    return f"""
        WITH reserved AS (
            UPDATE {w.table} SET {w.held} = {w.held} + %(amount)s, {w.updated_at} = %(created_at)s
            WHERE {w.account_id} = %(account_id)s AND {w.balance} >= {w.held} + %(amount)s
            RETURNING {w.id} AS wallet_id
        ),{_key_counted_cte(after="reserved")},
        held AS (
            INSERT INTO {h.table} (
                {h.kind}, {h.wallet_id}, {h.amount}, {h.status}, {h.reference}, {h.owner}, {h.created_at},
                {h.expires_at}, {h.api_key_id}, {h.key_window}, {h.key_window_start}
            )
            SELECT %(kind)s, reserved.wallet_id, %(amount)s, %(status)s, %(reference)s, %(owner)s,
                %(created_at)s, %(expires_at)s, %(api_key_id)s, %(key_window)s, %(key_window_start)s
            FROM reserved
            WHERE EXISTS (SELECT FROM key_counted)
            RETURNING {h.id} AS id, {h.wallet_id} AS wallet_id
        )
        SELECT EXISTS (SELECT FROM reserved), (SELECT id FROM held), (SELECT wallet_id FROM held)
    """  # noqa: S608 - identifiers from the models' _meta, values bound as parameters


def usage_record_fields() -> list[models.Field[Any, Any]]:
    """The columns a capture writes of the call's usage record (all but the id)."""
    return [field for field in UsageRecord._meta.concrete_fields if not field.primary_key]


def _key_given_back_cte(*, source: str, amount: str) -> str:
    """The start of the CTE `key_given_back`: `amount` (an expression over `source`, the CTE of the
    hold's won transition) goes back to the key window the hold names; the caller closes its WHERE
    clause and the parenthesis."""
    k = sql_names(KeyBudgetUsage)
    return f"""
        key_given_back AS (
            UPDATE {k.table} SET {k.used} = {k.table}.{k.used} - ({amount}), {k.updated_at} = %(now)s
            FROM {source}
            WHERE {k.table}.{k.api_key_id} = {source}.api_key_id
                AND {k.table}.{k.window} = {source}.key_window
                AND {k.table}.{k.window_start} = {source}.key_window_start
                AND {amount} > 0"""  # noqa: S608 - identifiers from the models' _meta


@functools.cache
def hold_capture_sql(*, recorded: bool, keyed: bool = False) -> str:
    """Capture as ONE statement, and with `recorded` the call's usage record too: no transaction and
    no lock held across a client round trip, and the charge and its record can only be written
    together.

    - `captured`: the status transition guarded by the old status: of a capture racing a release or
      an expiry exactly one updates the hold; the loser gets no row and everything below moves nothing.
      It records the charge, `%(capture_amount)s` (at most the hold's amount: billing.holds). The
      hold is matched by its id and its reference (the call's request id), as `hold_reserve_sql`
      says why.
    - `debited`: the wallet's held goes down by the hold's amount and its balance by the charge (only
      for a wallet hold of a non-zero amount). The UPDATE locks the wallet row and, under
      concurrency, computes from the committed row, so the balance it returns is exactly this
      charge's balance_after.
    - `charged`: the ledger charge (append-only) when the charge is not zero, with that balance_after
      and the hold's request id.
    - `recorded`: the usage record, with the amount captured, or 0 when the hold was no longer open.
    - `key_given_back` (with `keyed`, for a hold counted in an API key's budget window): what the
      hold reserved and the capture did not charge goes back to that window, only for the capture
      that won; after the wallet's row (the reservation's lock order).
    """
    h, w, e = sql_names(Hold), sql_names(Wallet), sql_names(LedgerEntry)
    key_returning, key_cte = "", ""
    if keyed:
        key_returning = (
            f", {h.api_key_id} AS api_key_id, {h.key_window} AS key_window,"
            f" {h.key_window_start} AS key_window_start"
        )
        given_back = _key_given_back_cte(source="captured", amount="captured.held_amount - captured.amount")
        key_cte = f""",{given_back}
            AND (captured.wallet_id IS NULL OR EXISTS (SELECT FROM debited))
        )"""
    ledger_columns = ", ".join(
        (e.wallet_id, e.kind, e.amount, e.balance_after, e.reference, e.note, e.created_at)
    )
    recorded_cte, result = "", "SELECT EXISTS (SELECT FROM captured)"
    if recorded:
        u = sql_names(UsageRecord)
        fields = usage_record_fields()
        columns = ", ".join(getattr(u, field.attname) for field in fields)
        values = ", ".join(
            "COALESCE((SELECT amount FROM captured), 0)"
            if field.attname == "amount"
            else f"%(usage_{field.attname})s"
            for field in fields
        )
        recorded_cte = f""",
        recorded AS (
            INSERT INTO {u.table} ({columns})
            VALUES ({values})
            RETURNING {u.id} AS id, {u.amount} AS amount
        )"""  # noqa: S608 - identifiers from the models' _meta, values bound as parameters
        result = "SELECT EXISTS (SELECT FROM captured), recorded.id, recorded.amount FROM recorded"
    return f"""
        WITH captured AS (
            UPDATE {h.table} SET {h.status} = %(captured)s, {h.resolved_at} = %(now)s,
                {h.captured_amount} = %(capture_amount)s
            WHERE {h.id} = %(hold_id)s AND {h.reference} = %(reference)s AND {h.status} = %(open)s
            RETURNING {h.wallet_id} AS wallet_id, {h.amount} AS held_amount,
                {h.captured_amount} AS amount, {h.reference} AS reference{key_returning}
        ),
        debited AS (
            UPDATE {w.table} SET
                {w.balance} = {w.table}.{w.balance} - captured.amount,
                {w.held} = {w.table}.{w.held} - captured.held_amount,
                {w.updated_at} = %(now)s
            FROM captured
            WHERE {w.table}.{w.id} = captured.wallet_id AND captured.held_amount > 0
            RETURNING {w.table}.{w.id} AS wallet_id, {w.table}.{w.balance} AS balance_after
        ),
        charged AS (
            INSERT INTO {e.table} ({ledger_columns})
            SELECT debited.wallet_id, %(charge)s, -captured.amount, debited.balance_after,
                captured.reference, '', %(written_at)s
            FROM debited CROSS JOIN captured
            WHERE captured.amount > 0
        ){key_cte}{recorded_cte}
        {result}
    """  # noqa: S608 - identifiers from the models' _meta, values bound as parameters


@functools.cache
def hold_release_sql(*, keyed: bool = False) -> str:
    """Release a wallet hold as ONE statement: the status transition guarded by the old status
    (exactly one resolution per hold; a loser gets no row and gives nothing back), then `held` goes
    down by the amount with a relative update, the wallet's row lock held only inside the statement.
    The held >= 0 constraint is the backstop. Matched by id and reference, as the capture is. With
    `keyed` (a hold counted in an API key's budget window) the amount goes back to that window too,
    after the wallet's row (the reservation's lock order)."""
    h, w = sql_names(Hold), sql_names(Wallet)
    key_returning, key_cte, unheld_returning = "", "", ""
    if keyed:
        key_returning = (
            f", {h.api_key_id} AS api_key_id, {h.key_window} AS key_window,"
            f" {h.key_window_start} AS key_window_start"
        )
        unheld_returning = "\n            RETURNING 1"
        key_cte = f""",{_key_given_back_cte(source="released", amount="released.amount")}
                AND EXISTS (SELECT FROM unheld)
        )"""
    return f"""
        WITH released AS (
            UPDATE {h.table} SET {h.status} = %(status)s, {h.resolved_at} = %(now)s
            WHERE {h.id} = %(hold_id)s AND {h.reference} = %(reference)s AND {h.status} = %(open)s
            RETURNING {h.wallet_id} AS wallet_id, {h.amount} AS amount{key_returning}
        ),
        unheld AS (
            UPDATE {w.table} SET {w.held} = {w.table}.{w.held} - released.amount, {w.updated_at} = %(now)s
            FROM released
            WHERE {w.table}.{w.id} = released.wallet_id AND released.amount > 0{unheld_returning}
        ){key_cte}
        SELECT EXISTS (SELECT FROM released)
    """  # noqa: S608 - identifiers from the models' _meta, values bound as parameters


@functools.cache
def subscription_hold_reserve_sql(*, capped: frozenset[str], keyed: bool = False) -> str:
    """Count the amount in every window and write the hold in ONE statement, run in a transaction so
    that a window refused after others were counted rolls them back.

    Per window an upsert: a missing counter is created (the first call of a day) at `amount`, an
    existing one is raised with the conditional `used + amount <= cap`, which PostgreSQL evaluates on
    the locked, committed row, so a cap is never overshot. Each window's upsert runs only once the
    previous window's has returned its row (`EXISTS (SELECT FROM counted_<previous>)`): this data
    dependency makes PostgreSQL lock the counters in the fixed order day, week, month, total (the
    order release uses too, so they cannot deadlock), and the chain stops at the first refused
    window. The hold is written only when all four counted. `capped` names the windows that have a
    cap: one statement per combination. With `keyed` the call is counted in its API key's budget
    window too, after the total window (`_key_counted_cte`), and the hold names that window. The
    result: per window in WINDOW_ORDER 1 if counted (0 if not), then with `keyed` 1 if the key's
    window counted, then the hold's id (NULL when refused).
    """
    u, h = sql_names(SubscriptionUsage), sql_names(Hold)
    counters = []
    previous = None
    for window in WINDOW_ORDER:
        has_cap = window in capped
        conditions = [f"EXISTS (SELECT FROM {previous})"] if previous else []
        if has_cap:
            conditions.append(f"%(amount)s <= %({window}_cap)s")  # a new counter must fit too
        where = f"WHERE {' AND '.join(conditions)}" if conditions else ""
        guard = f"WHERE counter.{u.used} + EXCLUDED.{u.used} <= %({window}_cap)s" if has_cap else ""
        key = f"{u.subscription_id}, {u.window}, {u.window_start}"
        counters.append(
            f"""
        counted_{window} AS (
            INSERT INTO {u.table} AS counter ({key}, {u.used}, {u.updated_at})
            SELECT %(subscription_id)s, %({window}_window)s, %({window}_start)s, %(amount)s, %(updated_at)s
            {where}
            ON CONFLICT ({key}) DO UPDATE SET {u.used} = counter.{u.used} + EXCLUDED.{u.used}
            {guard}
            RETURNING 1
        )"""
        )
        previous = f"counted_{window}"
    counted = [f"counted_{w}" for w in WINDOW_ORDER]
    if keyed:
        counters.append(_key_counted_cte(after=str(previous)))
        counted.append("key_counted")
        previous = "key_counted"
    counts = ", ".join(f"(SELECT count(*) FROM {name})" for name in counted)  # noqa: S608
    return f"""
        WITH {",".join(counters)},
        held AS (
            INSERT INTO {h.table} (
                {h.kind}, {h.subscription_id}, {h.amount}, {h.status}, {h.reference}, {h.owner},
                {h.day_start}, {h.week_start}, {h.month_start}, {h.created_at}, {h.expires_at},
                {h.api_key_id}, {h.key_window}, {h.key_window_start}
            )
            SELECT %(kind)s, %(subscription_id)s, %(amount)s, %(status)s, %(reference)s, %(owner)s,
                %(day_start)s, %(week_start)s, %(month_start)s, %(created_at)s, %(expires_at)s,
                %(api_key_id)s, %(key_window)s, %(key_window_start)s
            WHERE EXISTS (SELECT FROM {previous})
            RETURNING {h.id}
        )
        SELECT {counts}, (SELECT {h.id} FROM held)
    """  # noqa: S608 - identifiers from the models' _meta, values bound as parameters
