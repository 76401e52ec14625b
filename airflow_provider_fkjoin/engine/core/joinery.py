"""Yelp Joinery's own config format, read as a ``multiway_join`` spec (pure Python, no Spark).

Joinery names each input by a ``schema_id`` of Yelp's schema registry. Here a ``schemas:`` map resolves
those ids to Delta tables (``path`` or catalog ``table``, primary ``key``, optional ``changelog`` and
``name``); the ``join:`` list and ``output`` are read as Joinery writes them. Two of Joinery's quirks are
kept visible rather than fatal, as the reference asks (and its spellings are taken as it writes them:
keys match whatever their case, so the published example's ``Doc`` is ``doc``):

* its published example declares ``pkey: business_id`` although an alias renames that field to
  ``biz_id``: a ``pkey`` field renamed by an alias is resolved to its new name, with a note;
* that ``pkey`` is not unique in a business-to-reviews join: a Joinery spec sets ``enforce_pkey: false``,
  so every refresh counts the repeated ``pkey`` values and warns instead of failing.

Example::

    from_joinery({
        "format": "joinery",
        "schemas": {56789: {"path": "/w/business", "key": ["business_id"]},
                    12345: {"path": "/w/reviews", "key": ["review_id"]}},
        "join": [{"schema_id": 56789, "join_keys": ["business_id"],
                  "aliases": [{"from": "business_id", "to": "biz_id"}]},
                 {"schema_id": 12345, "join_keys": ["biz_id"], "exclude_fields": ["text"]}],
        "output": {"namespace": "joinery", "source": "business_reviews", "doc": "...",
                   "pkey": "business_id", "path": "/w/business_reviews"}})
    # -> {"kind": "multiway_join", "inputs": [{"name": "business", ...}, {"name": "reviews", ...}],
    #     "output": {"path": "/w/business_reviews", "pkey": ["biz_id"]}, "enforce_pkey": False,
    #     "notes": ["output.pkey: 'business_id' is renamed to 'biz_id' by input business's aliases; ..."]}
"""

from __future__ import annotations

import re
from typing import Any

from .errors import SpecError

_JOIN_FIELDS = {"schema_id", "join_keys", "exclude_fields", "aliases"}
_SCHEMA_FIELDS = {"path", "table", "key", "changelog", "name"}
_OUTPUT_FIELDS = {"namespace", "source", "doc", "pkey", "path", "name", "adopt_existing_output", "owner"}
_TOP_FIELDS = {
    "format",
    "kind",
    "join",
    "schemas",
    "output",
    "max_rows_per_join_key",
    "enforce_pkey",
    "adopt_existing_output",
}


def is_joinery(data: dict[str, Any]) -> bool:
    """Whether a spec document is in Joinery's format: ``format: joinery``, or ``join:`` and no kind."""
    return data.get("format") == "joinery" or ("join" in data and "kind" not in data)


def _require_mapping(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SpecError(f"invalid spec: {where}: must be a mapping of fields, not {value!r:.80}")
    return value


def _canonical(data: dict[str, Any], allowed: set[str], where: str) -> dict[str, Any]:
    """``data`` with its keys spelled as ``allowed`` spells them; unknown keys are refused.

    Joinery's own configs do not agree on case (its published example writes ``Doc``), so a key matches a
    known field whatever its case; one field given twice under two spellings is refused.

    >>> _canonical({"Doc": "...", "pkey": "id"}, {"doc", "pkey"}, "output")
    {'doc': '...', 'pkey': 'id'}
    """
    by_folded = {name.casefold(): name for name in allowed}
    found: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    extra = []
    for key, value in data.items():
        name = by_folded.get(str(key).casefold())
        if name is None:
            extra.append(str(key))
            continue
        if name in found:
            raise SpecError(
                f"invalid spec: {where}: {spelled[name]!r} and {key!r} are the same field; give it once"
            )
        found[name], spelled[name] = value, str(key)
    if extra:
        raise SpecError(
            f"invalid spec: {where}: {sorted(extra)} not known in a Joinery config "
            f"(known: {', '.join(sorted(allowed))})"
        )
    return found


def _input_name(entry: dict[str, Any], schema_id: Any, taken: set[str]) -> str:
    """The input's name: the schema entry's ``name``, else the table's last path or name part."""
    name = entry.get("name")
    if not name:
        where = str(entry.get("path") or entry.get("table") or f"schema_{schema_id}")
        name = re.sub(r"[^A-Za-z0-9_]", "_", where.rstrip("/").rsplit("/", 1)[-1].rsplit(".", 1)[-1])
        if not name or name[0].isdigit():
            name = f"schema_{name}"
        name = name[:60]
    base, suffix = name, 2
    while name in taken:
        name = f"{base}_{suffix}"
        suffix += 1
    taken.add(name)
    return name


def from_joinery(data: dict[str, Any]) -> dict[str, Any]:
    """A Joinery config (with its ``schemas:`` map) as a native ``multiway_join`` spec dict."""
    data = _canonical(data, _TOP_FIELDS, "spec")
    if data.get("kind", "multiway_join") != "multiway_join":
        raise SpecError(f"invalid spec: kind: a Joinery config is a multiway_join, not {data['kind']!r}")
    join = data.get("join")
    if not isinstance(join, list) or len(join) < 2:
        raise SpecError("invalid spec: join: list at least two inputs, each with a schema_id and join_keys")
    schemas = _require_mapping(data.get("schemas"), "schemas")
    by_id = {str(k): v for k, v in schemas.items()}
    inputs: list[dict[str, Any]] = []
    taken: set[str] = set()
    for index, raw in enumerate(join):
        item = _canonical(_require_mapping(raw, f"join[{index}]"), _JOIN_FIELDS, f"join[{index}]")
        if "schema_id" not in item:
            raise SpecError(f"invalid spec: join[{index}].schema_id: is required")
        schema_id = item["schema_id"]
        if str(schema_id) not in by_id:
            raise SpecError(
                f"invalid spec: join[{index}].schema_id: {schema_id!r} is not in schemas; add "
                f"schemas: {{{schema_id}: {{path: ..., key: [...]}}}}"
            )
        entry = _canonical(
            _require_mapping(by_id[str(schema_id)], f"schemas.{schema_id}"),
            _SCHEMA_FIELDS,
            f"schemas.{schema_id}",
        )
        fields = {k: v for k, v in entry.items() if k != "name"}
        fields.update({k: v for k, v in item.items() if k != "schema_id"})
        inputs.append({"name": _input_name(entry, schema_id, taken), **fields})
    output = _canonical(_require_mapping(data.get("output"), "output"), _OUTPUT_FIELDS, "output")
    location: dict[str, Any] = {k: output[k] for k in ("path", "name") if k in output}
    if not location:
        namespace, source = output.get("namespace"), output.get("source")
        if not namespace or not source:
            raise SpecError(
                "invalid spec: output: give path (a Delta table location), or namespace and source (the "
                "catalog table namespace.source)"
            )
        location = {"name": f"{namespace}.{source}"}
    notes: list[str] = []
    pkey = output.get("pkey")
    if pkey is not None:
        pkey = [pkey] if isinstance(pkey, str) else list(pkey)
        pkey = [_resolve_pkey(column, inputs, notes) for column in pkey]
        location["pkey"] = pkey
    for field in ("adopt_existing_output", "owner"):
        if field in output:
            location[field] = output[field]
    spec: dict[str, Any] = {
        "kind": "multiway_join",
        "format": "joinery",
        "inputs": inputs,
        "output": location,
        "enforce_pkey": data.get("enforce_pkey", False),
        "notes": notes,
        "description": {k: str(output[k]) for k in ("namespace", "source", "doc") if k in output},
    }
    for field in ("max_rows_per_join_key", "adopt_existing_output"):
        if field in data:
            spec[field] = data[field]
    return spec


def _resolve_pkey(column: str, inputs: list[dict[str, Any]], notes: list[str]) -> str:
    """A ``pkey`` field renamed by an input's alias is taken under its new name (with a note)."""
    renamed = {
        (alias.get("to"), item["name"])
        for item in inputs
        for alias in item.get("aliases") or []
        if isinstance(alias, dict) and alias.get("from") == column
    }
    targets = sorted({to for to, _ in renamed if to})
    if not targets:
        return column
    if len(targets) > 1:
        raise SpecError(
            f"invalid spec: output.pkey: {column!r} is renamed to {targets} by different inputs' aliases; "
            "name the output column you mean"
        )
    owners = ", ".join(sorted(name for _, name in renamed))
    notes.append(
        f"output.pkey: {column!r} is renamed to {targets[0]!r} by input {owners}'s aliases; the output has "
        f"no {column!r}, so pkey uses {targets[0]!r}"
    )
    return targets[0]
