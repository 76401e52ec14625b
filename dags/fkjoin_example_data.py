"""Example data for the fkjoin example DAGs: where the warehouse is, and the seed tasks' writers.

Every DAG run appends one deterministic batch of changes (batch ``n`` is the n-th run against this
warehouse), so repeated runs exercise incremental refreshes. The batches are plain data, written by
:func:`write_batch` with ``deltalake`` (change data feed on; no JVM); tests recompute the joins from
the tables themselves.

Warehouse: ``FKJOIN_WAREHOUSE``, else ``$AIRFLOW_HOME/fkjoin-warehouse`` (``~/airflow`` without it).
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Any


def warehouse() -> Path:
    """The folder holding the example Delta tables (created on first use)."""
    configured = os.environ.get("FKJOIN_WAREHOUSE")
    home = Path(os.environ.get("AIRFLOW_HOME") or Path.home() / "airflow")
    return Path(configured).expanduser().resolve() if configured else (home / "fkjoin-warehouse").resolve()


# -- KIP-99: products CDC changelog + orders stream ---------------------------------------------------
CHANGELOG = {"op_column": "op", "order_by": ["lsn"], "columns": ["name", "price"]}


def products_cdc_batch(batch: int) -> list[dict[str, Any]]:
    """CDC events of batch ``batch`` (0-based): a snapshot first, then updates, deletes and creates."""
    base = batch * 100
    if batch == 0:
        events = [(pid, "r", f"product {pid}", 10.0 * pid) for pid in range(1, 6)]
        events.append((2, "u", "product 2 (v2)", 21.0))  # updated within the first batch
    else:
        events = [
            (1, "u", f"product 1 (batch {batch})", 10.0 + batch),
            (5 + batch, "c", f"product {5 + batch}", 5.0 * batch),  # a new product each batch
            (3 + batch % 2, "d", None, None),  # deletes product 3 or 4
        ]
    return [
        {"product_id": pid, "op": op, "lsn": base + i, "name": name, "price": price}
        for i, (pid, op, name, price) in enumerate(events, 1)
    ]


def orders_stream_batch(batch: int) -> list[dict[str, Any]]:
    """Orders appended by batch ``batch``: known products, a new one, a deleted one, an unknown one."""
    first = batch * 10 + 1
    products = [1, 2, 5 + batch, 3 + batch % 2, 99]
    at = dt.datetime(2025, 1, 1, tzinfo=dt.UTC) + dt.timedelta(hours=batch)
    return [
        {
            "order_id": first + i,
            "product_id": product,
            "quantity": 1 + i,
            "ordered_at": at + dt.timedelta(minutes=i),
        }
        for i, product in enumerate(products)
    ]


# -- KIP-213: customers + orders tables --------------------------------------------------------------
def kip213_initial() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Batch 0: six customers and twelve orders."""
    customers = [
        {"customer_id": c, "name": f"customer {c}", "tier": "gold" if c % 3 == 0 else "basic"}
        for c in range(1, 7)
    ]
    orders = [{"order_id": o, "customer_id": 1 + o % 6, "amount": 5.0 * o} for o in range(1, 13)]
    return customers, orders


# -- windowed join: ad impressions + clicks (append-only event tables) -------------------------------
AD_START = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


def impressions_batch(batch: int) -> list[dict[str, Any]]:
    """Impressions of batch ``batch``: ads a1..a4 shown ten minutes apart, two hours after the last batch."""
    base = AD_START + dt.timedelta(hours=2 * batch)
    return [
        {
            "impression_id": batch * 10 + i,
            "ad_id": f"a{i}",
            "shown_at": base + dt.timedelta(minutes=10 * (i - 1)),
            "offset": batch * 10 + i,
        }
        for i in range(1, 5)
    ]


def clicks_batch(batch: int) -> list[dict[str, Any]]:
    """Clicks of batch ``batch``: two on this batch's a1 and a2 within minutes, one with no ad (a null
    key), and from batch 1 on a late click on the previous batch's a4, exactly an hour after it was shown."""
    base = AD_START + dt.timedelta(hours=2 * batch)
    clicks = [
        {"click_id": batch * 10 + 1, "ad_id": "a1", "clicked_at": base + dt.timedelta(minutes=5)},
        {"click_id": batch * 10 + 2, "ad_id": "a2", "clicked_at": base + dt.timedelta(minutes=12)},
        {"click_id": batch * 10 + 3, "ad_id": None, "clicked_at": base + dt.timedelta(minutes=20)},
    ]
    if batch:
        shown = AD_START + dt.timedelta(hours=2 * (batch - 1), minutes=30)
        clicks.append(
            {"click_id": batch * 10 + 4, "ad_id": "a4", "clicked_at": shown + dt.timedelta(hours=1)}
        )
    return [{**click, "offset": click["click_id"]} for click in clicks]


# -- self-join: card transactions (one append-only event table) -------------------------------------
CARD_START = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


def card_txns_batch(batch: int) -> list[dict[str, Any]]:
    """Card transactions of batch ``batch`` (an hour after the previous batch): card c1 twice four minutes
    apart, c2 twice fourteen minutes apart (outside ten minutes), c3 once, a transaction with no card (a
    null key), and from batch 1 on a late c3 transaction five minutes after the previous batch's."""
    base = CARD_START + dt.timedelta(hours=batch)
    txns = [
        ("c1", base + dt.timedelta(minutes=1), "atm-north", 200.0),
        ("c1", base + dt.timedelta(minutes=5), "atm-south", 300.0),
        ("c2", base + dt.timedelta(minutes=2), "shop", 25.5),
        ("c2", base + dt.timedelta(minutes=16), "shop", 12.0),
        ("c3", base + dt.timedelta(minutes=30), "atm-north", 60.0),
        (None, base + dt.timedelta(minutes=31), "unknown", 1.0),
    ]
    if batch:
        late = CARD_START + dt.timedelta(hours=batch - 1, minutes=35)
        txns.append(("c3", late, "atm-east", 80.0))
    return [
        {"txn_id": batch * 10 + i, "card_id": card, "txn_at": at, "place": place, "amount": amount,
         "offset": batch * 10 + i}
        for i, (card, at, place, amount) in enumerate(txns, 1)
    ]  # fmt: skip


# -- windowed join, table mode: per-minute error counts (a windowed table) ---------------------------
WEEK_START = dt.datetime(2025, 1, 6, tzinfo=dt.UTC)


def _minute(week: int, minute: int) -> tuple[dt.datetime, dt.datetime]:
    start = WEEK_START + dt.timedelta(weeks=week, minutes=minute)
    return start, start + dt.timedelta(minutes=1)


def errors_batch(batch: int) -> tuple[list[dict[str, Any]], list[tuple[str, int, int, int]]]:
    """Batch ``batch`` of per-minute error counts: (new windows, late corrections).

    Batch 0 writes last week's minutes 0-5 for ``api`` and ``web`` and this week's minutes 0-1 for
    ``api``; each later batch adds this week's next two ``api`` minutes and one ``web`` minute, and
    corrects the count of the previous batch's last ``api`` minute (a late update: its row changes).
    Corrections are ``(service, week, minute, new_errors)``.
    """
    rows: list[tuple[str, int, int, int]] = []
    corrections: list[tuple[str, int, int, int]] = []
    if batch == 0:
        rows += [(service, 0, m, m + 1) for service in ("api", "web") for m in range(6)]
        rows += [("api", 1, m, 10 * (m + 1)) for m in range(2)]
    else:
        rows += [("api", 1, m, 10 * (m + 1)) for m in (2 * batch, 2 * batch + 1)]
        rows.append(("web", 1, batch - 1, 3))
        corrections.append(("api", 1, 2 * batch - 1, 100 + batch))
    new = []
    for service, week, minute, errors in rows:
        start, end = _minute(week, minute)
        new.append({"service": service, "ws": start, "we": end, "errors": errors})
    return new, corrections


# -- N-way join (Joinery): businesses, their reviews and their owners (keyed tables) ------------------
#: Each table's primary key: a batch upserts whole rows and deletes rows by these columns' values.
BUSINESS_REVIEWS_KEYS: dict[str, tuple[str, ...]] = {
    "business": ("business_id",),
    "review": ("review_id",),
    "business_owner": ("owner_id", "business_id"),  # one row per owner of a business: N:M with reviews
}


def business_reviews_batch(batch: int) -> dict[str, dict[str, list[Any]]]:
    """Changes of batch ``batch`` to the business, review and business_owner tables, as
    ``{table: {"upsert": [row, ...], "delete": [key tuple, ...]}}`` (deletes apply first).

    Batch 0 creates the tables: b1 with three reviews and one owner (1:N), b2 with two reviews and two
    owners (N:M: four joined rows), b3 with two reviews, b4 with an owner but no review, b5 with a review
    but no owner, b6 with one of each, a review of a business that does not exist (b9) and one that names
    no business: ten joined rows. Batch 1 renames b1 (its three rows change), rates review 2 again, moves
    review 7 from b3 to b2 (a join-key change), deletes review 4, business b3 (retracting its last row)
    and b6's owner, gives b5 an owner and b4 a review, and adds review 1001 to b2: eleven rows. Each later
    batch ``n`` renames b1, adds review ``1000 + n`` to b2 and deletes the previous batch's, moves review 5
    between b2 (odd n) and b1 (even n), and drops b2's second owner (even n) or brings her back (odd n).

    Example::

        business_reviews_batch(1)["review"]["delete"]   # [(4,)]
    """
    if batch == 0:
        business = [
            ("b1", "Golden Dragon", "Toronto"),
            ("b2", "Pizza Place", "Pittsburgh"),
            ("b3", "Taco Stand", "Phoenix"),
            ("b4", "Quiet Cafe", "Montreal"),
            ("b5", "Sushi Bar", "Las Vegas"),
            ("b6", "Bagel Shop", "Toronto"),
        ]
        reviews = [
            (1, "b1", "u1", 5), (2, "b1", "u2", 4), (3, "b1", "u3", 3),
            (4, "b2", "u1", 2), (5, "b2", "u4", 5),
            (6, "b3", "u2", 4), (7, "b3", "u5", 1),
            (8, "b5", "u3", 5), (9, "b9", "u6", 3), (10, None, "u7", 2),
            (11, "b6", "u4", 4),
        ]  # fmt: skip
        owners = [
            ("o1", "b1", "Alice", 100), ("o2", "b2", "Bob", 60), ("o3", "b2", "Carol", 40),
            ("o1", "b3", "Alice", 100), ("o4", "b4", "Dave", 100), ("o6", "b6", "Erin", 100),
        ]  # fmt: skip
        deleted: dict[str, list[tuple[Any, ...]]] = {"business": [], "review": [], "business_owner": []}
    elif batch == 1:
        business = [("b1", "Golden Dragon Express", "Toronto")]
        reviews = [(2, "b1", "u2", 5), (7, "b2", "u5", 1), (12, "b4", "u2", 4), (1001, "b2", "u6", 5)]
        owners = [("o5", "b5", "Frank", 100)]
        deleted = {"business": [("b3",)], "review": [(4,)], "business_owner": [("o6", "b6")]}
    else:
        business = [("b1", f"Golden Dragon ({batch})", "Toronto")]
        reviews = [(1000 + batch, "b2", "u8", 1 + batch % 5), (5, "b1" if batch % 2 == 0 else "b2", "u4", 5)]
        if batch % 2 == 0:
            owners = [("o2", "b2", "Bob", 100)]
            deleted = {"business_owner": [("o3", "b2")]}
        else:
            owners = [("o2", "b2", "Bob", 60), ("o3", "b2", "Carol", 40)]
            deleted = {"business_owner": []}
        deleted.update(business=[], review=[(1000 + batch - 1,)])
    return {
        "business": {
            "upsert": [{"business_id": b, "name": name, "city": city} for b, name, city in business],
            "delete": deleted["business"],
        },
        "review": {
            "upsert": [
                {"review_id": r, "biz_id": b, "user_id": u, "stars": stars, "text": f"review {r} by {u}"}
                for r, b, u, stars in reviews
            ],
            "delete": deleted["review"],
        },
        "business_owner": {
            "upsert": [
                {"owner_id": o, "business_id": b, "owner_name": name, "share_pct": share}
                for o, b, name, share in owners
            ],
            "delete": deleted["business_owner"],
        },
    }


def _schemas() -> dict[str, Any]:
    import pyarrow as pa

    return {
        "products_cdc": pa.schema(
            [("product_id", pa.int64()), ("op", pa.string()), ("lsn", pa.int64()), ("name", pa.string()),
             ("price", pa.float64())]
        ),
        "orders_stream": pa.schema(
            [("order_id", pa.int64()), ("product_id", pa.int64()), ("quantity", pa.int32()),
             ("ordered_at", pa.timestamp("us", tz="UTC"))]
        ),
        "customers": pa.schema([("customer_id", pa.int64()), ("name", pa.string()), ("tier", pa.string())]),
        "errors_per_min": pa.schema(
            [("service", pa.string()), ("ws", pa.timestamp("us", tz="UTC")),
             ("we", pa.timestamp("us", tz="UTC")), ("errors", pa.int64())]
        ),
        "impressions": pa.schema(
            [("impression_id", pa.int64()), ("ad_id", pa.string()),
             ("shown_at", pa.timestamp("us", tz="UTC")), ("offset", pa.int64())]
        ),
        "clicks": pa.schema(
            [("click_id", pa.int64()), ("ad_id", pa.string()),
             ("clicked_at", pa.timestamp("us", tz="UTC")), ("offset", pa.int64())]
        ),
        "orders": pa.schema(
            [("order_id", pa.int64()), ("customer_id", pa.int64()), ("amount", pa.float64())]
        ),
        "card_txns": pa.schema(
            [("txn_id", pa.int64()), ("card_id", pa.string()), ("txn_at", pa.timestamp("us", tz="UTC")),
             ("place", pa.string()), ("amount", pa.float64()), ("offset", pa.int64())]
        ),
        "business": pa.schema([("business_id", pa.string()), ("name", pa.string()), ("city", pa.string())]),
        "review": pa.schema(
            [("review_id", pa.int64()), ("biz_id", pa.string()), ("user_id", pa.string()),
             ("stars", pa.int64()), ("text", pa.string())]
        ),
        "business_owner": pa.schema(
            [("owner_id", pa.string()), ("business_id", pa.string()), ("owner_name", pa.string()),
             ("share_pct", pa.int64())]
        ),
    }  # fmt: skip


def write_batch(paths: dict[str, Path], kind: str) -> dict[str, Any]:
    """Append the next batch of example changes to the tables of ``kind``: ``kip99``, ``kip213``, ``ads``,
    ``cards``, ``errors`` or ``business_reviews``.

    Creates the tables (change data feed on) when absent. Writes with ``deltalake`` (no JVM needed).
    Returns ``{"batch": n, "versions": {table: version}}``.
    """
    from deltalake import DeltaTable

    if kind == "kip99":
        batch = _next_batch(kind, paths["products_cdc"])
        _append(paths["products_cdc"], "products_cdc", products_cdc_batch(batch))
        _append(paths["orders_stream"], "orders_stream", orders_stream_batch(batch))
    elif kind == "kip213":
        batch = _next_batch(kind, paths["customers"])
        if batch == 0:
            customers, orders = kip213_initial()
            _append(paths["customers"], "customers", customers)
            _append(paths["orders"], "orders", orders)
        else:
            customers_table = DeltaTable(str(paths["customers"]))
            customers_table.update(
                predicate=f"customer_id = {1 + batch % 6}", updates={"name": f"'customer renamed {batch}'"}
            )
            customers_table.delete(f"customer_id = {1 + (batch + 2) % 6}")
            _append(
                paths["customers"],
                "customers",
                [{"customer_id": 100 + batch, "name": f"new {batch}", "tier": "gold"}],
            )
            orders_table = DeltaTable(str(paths["orders"]))
            orders_table.update(predicate=f"order_id = {batch}", updates={"customer_id": f"{100 + batch}"})
            orders_table.delete(f"order_id = {batch + 6}")
            new = [
                {"order_id": 1000 + batch * 10 + i, "customer_id": 1 + i, "amount": 7.5 * i} for i in range(3)
            ]
            _append(paths["orders"], "orders", new)
    elif kind == "errors":
        batch = _next_batch(kind, paths["errors_per_min"])
        new, corrections = errors_batch(batch)
        _append(paths["errors_per_min"], "errors_per_min", new)
        if corrections:
            import pyarrow as pa

            fixed = []
            for service, week, minute, errors in corrections:
                start, end = _minute(week, minute)
                fixed.append({"service": service, "ws": start, "we": end, "errors": errors})
            (
                DeltaTable(str(paths["errors_per_min"]))
                .merge(
                    pa.Table.from_pylist(fixed, schema=_schemas()["errors_per_min"]),
                    predicate="t.service = s.service AND t.ws = s.ws AND t.we = s.we",
                    source_alias="s",
                    target_alias="t",
                )
                .when_matched_update(updates={"errors": "s.errors"})
                .execute()
            )
    elif kind == "ads":
        batch = _next_batch(kind, paths["impressions"])
        _append(paths["impressions"], "impressions", impressions_batch(batch))
        _append(paths["clicks"], "clicks", clicks_batch(batch))
    elif kind == "cards":
        batch = _next_batch(kind, paths["card_txns"])
        _append(paths["card_txns"], "card_txns", card_txns_batch(batch))
    elif kind == "business_reviews":
        batch = _next_batch(kind, paths["review"])
        for table, changes in business_reviews_batch(batch).items():
            _apply(paths[table], table, changes["upsert"], changes["delete"])
    else:
        raise ValueError(f"unknown example kind {kind!r}")
    versions = {name: DeltaTable(str(path)).version() for name, path in paths.items()}
    return {"batch": batch, "versions": versions}


def _next_batch(kind: str, path: Path) -> int:
    """How many batches the seed wrote before, read from the data itself (so reruns stay consistent)."""
    if not (path / "_delta_log").is_dir():
        return 0
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    if kind == "errors":  # batch n >= 1 adds this week's api minutes 2n and 2n+1
        table = pa.table(DeltaTable(str(path)).to_pyarrow_table(columns=["service", "ws"]))
        this_week = [
            ws
            for service, ws in zip(table["service"].to_pylist(), table["ws"].to_pylist(), strict=True)
            if service == "api" and ws >= WEEK_START + dt.timedelta(weeks=1)
        ]
        return (len(this_week) - 2) // 2 + 1
    if kind in ("ads", "cards"):  # batch n's rows have ids n*10+1..n*10+9
        column = "impression_id" if kind == "ads" else "txn_id"
        ids = pa.table(DeltaTable(str(path)).to_pyarrow_table(columns=[column]))[column]
        return int(pc.max(ids).as_py()) // 10 + 1
    if kind == "business_reviews":  # batch n >= 1 adds review 1000+n (and deletes only older ones)
        ids = pa.table(DeltaTable(str(path)).to_pyarrow_table(columns=["review_id"]))["review_id"]
        return max(int(pc.max(ids).as_py()) - 1000, 0) + 1
    if kind == "kip99":  # batch n's events have lsn n*100+1...
        lsn = pa.table(DeltaTable(str(path)).to_pyarrow_table(columns=["lsn"]))["lsn"]
        return int(pc.max(lsn).as_py()) // 100 + 1
    ids = pa.table(DeltaTable(str(path)).to_pyarrow_table(columns=["customer_id"]))["customer_id"]
    return 1 + int(pc.sum(pc.greater_equal(ids, 100)).as_py() or 0)  # batch n >= 1 adds customer 100+n


def _append(path: Path, name: str, rows: list[dict[str, Any]]) -> None:
    import pyarrow as pa
    from deltalake import write_deltalake

    write_deltalake(
        str(path),
        pa.Table.from_pylist(rows, schema=_schemas()[name]),
        mode="append",
        configuration={"delta.enableChangeDataFeed": "true"},
    )


def _sql_literal(value: Any) -> str:
    """A key value as a SQL literal for a deltalake predicate: ``'b1'`` (quotes doubled), ``4``."""
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return str(int(value))


def _apply(path: Path, name: str, upserts: list[dict[str, Any]], deletes: list[tuple[Any, ...]]) -> None:
    """Apply a keyed table's changes: create it from ``upserts`` when absent, else delete the rows whose key
    is in ``deletes`` (one commit), then MERGE ``upserts`` by key (one commit: update or insert)."""
    import pyarrow as pa
    from deltalake import DeltaTable

    if not (path / "_delta_log").is_dir():
        _append(path, name, upserts)
        return
    key = BUSINESS_REVIEWS_KEYS[name]
    table = DeltaTable(str(path))
    if deletes:
        predicate = " OR ".join(
            "(" + " AND ".join(f"{c} = {_sql_literal(v)}" for c, v in zip(key, values, strict=True)) + ")"
            for values in deletes
        )
        table.delete(predicate)
    if upserts:
        (
            table.merge(
                pa.Table.from_pylist(upserts, schema=_schemas()[name]),
                predicate=" AND ".join(f"t.{c} = s.{c}" for c in key),
                source_alias="s",
                target_alias="t",
            )
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )
