"""Global tables (``global_table_bootstrap``): the products source's schema, the spec bootstrapping it, and
a table's rows by key for comparing the output with its source."""

from __future__ import annotations

from pathlib import Path

PRODUCTS = "product_id long, name string, price double"


def state(rows: list[dict], key: str = "product_id") -> dict:
    """Rows by key, without the engine's internal columns."""
    return {r[key]: tuple(v for c, v in r.items() if c != key and not c.startswith("_fkjoin_")) for r in rows}


def spec_for(source: Path, output: Path, **extra) -> dict:
    return {
        "kind": "global_table_bootstrap",
        "source": {"path": str(source), "key": ["product_id"]},
        "output": {"path": str(output)},
        **extra,
    }
