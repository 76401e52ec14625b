"""A spec checked against its tables without a JVM, and an output's status read from Delta logs alone.

``fkjoin validate`` and ``fkjoin status`` answer from here in well under a second: the spec is loaded (every
field checked), then each input's Delta log is read with ``deltalake``, for its columns and its change
data feed setting, and the output's, for its owner and its last refresh. Nothing is written and no Spark
session starts. What only Spark can check (the SQL in ``columns`` or ``foreign_key.expr``, column types,
catalog tables) is left to the refresh, which checks it again before it reads any data.

>>> report = validate_spec("specs/orders_enriched.yaml")  # doctest: +SKIP
>>> report["valid"], report["problems"]  # doctest: +SKIP
(False, [{'field': 'left.key[0]', 'message': "column 'order_id' is not in left table /w/orders ..."}])
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import deltalake

from ..core.errors import SpecError
from ..core.owners import OWNER_PROPERTY, check_output_owner, spec_owner
from ..core.progress import Progress
from ..core.spec import RESERVED_PREFIX, load_spec, spec_fingerprint
from ..core.status import status_report
from .freshness import LOOKED_UP
from .watermarks import TableMissingError, open_table, scan_output_log

CDF_PROPERTY = "delta.enableChangeDataFeed"
_READ_ERRORS = (TableMissingError, OSError, deltalake.exceptions.DeltaError)


def _ref_columns(prefix: str, ref: Any) -> list[tuple[str, list[str]]]:
    """The columns one table reference names, by field path: keys, event time, order, window, changelog."""
    named: list[tuple[str, list[str]]] = []
    for field in ("key", "join_keys", "order_by", "exclude_fields"):
        value = getattr(ref, field, None)
        if value:
            named.append((f"{prefix}.{field}", list(value)))
    if getattr(ref, "time", None):
        named.append((f"{prefix}.time", [ref.time]))
    window = getattr(ref, "window", None)
    if window is not None:
        named.append((f"{prefix}.window", [window.start, window.end]))
    aliases = getattr(ref, "aliases", None)
    if aliases:
        named.append((f"{prefix}.aliases", [alias.from_ for alias in aliases]))
    log = getattr(ref, "changelog", None)
    if log is not None:
        named.append((f"{prefix}.changelog.op_column", [log.op_column]))
        named.append((f"{prefix}.changelog.order_by", list(log.order_by)))
        if log.columns:
            named.append((f"{prefix}.changelog.columns", list(log.columns)))
    return named


def column_references(spec: Any) -> dict[str, list[tuple[str, list[str]]]]:
    """The columns a loaded spec names in each input, by side: ``{side: [(field path, columns)]}``.

    Only plain column names: SQL expressions (``columns``, ``foreign_key: {expr: ...}``) need Spark.

    >>> spec = load_spec({"kind": "foreign_key_join", "left": {"path": "/w/o", "key": ["id"]},
    ...     "right": {"path": "/w/c", "key": ["cid"]}, "foreign_key": ["cust"], "output": {"path": "/w/x"}})
    >>> column_references(spec)["left"]
    [('left.key', ['id']), ('foreign_key', ['cust'])]
    """
    if spec.kind == "multiway_join":
        return {item.name: _ref_columns(f"inputs[{i}]", item) for i, item in enumerate(spec.inputs_)}
    named = {side: _ref_columns(side, ref) for side, ref in spec.inputs().items()}
    for field, side in (("foreign_key", "left"), ("key_mapper", "stream")):
        value = getattr(spec, field, None)
        if isinstance(value, list):
            named[side].append((field, list(value)))
    return named


def _problem(field: str, message: str) -> dict[str, str]:
    return {"field": field, "message": message}


def _check_input(
    spec: Any, side: str, ref: Any, storage_options: dict[str, str] | None, report: dict[str, Any]
) -> None:
    problems, warnings = report["problems"], report["warnings"]
    field = f"inputs[{list(spec.inputs()).index(side)}]" if spec.kind == "multiway_join" else side
    if ref.path is None:
        warnings.append(
            f"{side}: catalog table {ref.name} is not checked without Spark (a refresh checks it)"
        )
        return
    try:
        table = open_table(ref.path, storage_options)
        metadata = table.metadata()
        columns = [f.name for f in table.schema().fields]
    except _READ_ERRORS as error:
        problems.append(
            _problem(
                f"{field}.path",
                f"no readable Delta table at {ref.path} ({error}); create it (with {CDF_PROPERTY}=true) "
                "or fix the path",
            )
        )
        return
    cdf = str(metadata.configuration.get(CDF_PROPERTY, "false")).lower() == "true"
    report["inputs"][side] = {
        "path": ref.path,
        "version": int(table.version()),
        "table_id": str(metadata.id),
        "change_data_feed": cdf,
        "columns": columns,
    }
    for path, named in column_references(spec)[side]:
        for index, column in enumerate(named):
            if column not in columns:
                problems.append(
                    _problem(
                        f"{path}[{index}]",
                        f"column {column!r} is not in {side} table {ref.path} "
                        f"(columns: {', '.join(columns)})",
                    )
                )
    reserved = [c for c in columns if c.startswith(RESERVED_PREFIX)]
    if reserved and OWNER_PROPERTY not in metadata.configuration:
        problems.append(
            _problem(
                f"{field}.path",
                f"{side} table {ref.path} has columns {reserved}: names starting with {RESERVED_PREFIX!r} "
                "are reserved for the engine; rename them",
            )
        )
    if not cdf and side not in LOOKED_UP.get(spec.kind, ()):
        warnings.append(
            f"change data feed is off on input {side} ({ref.path}): every refresh will be a full rebuild; "
            f"enable it with ALTER TABLE ... SET TBLPROPERTIES ({CDF_PROPERTY} = true)"
        )


def _holds_other_files(path: str) -> bool:
    """A local location that is not a Delta table but holds files (not what a killed create leaves)."""
    local = Path(path.removeprefix("file://").removeprefix("file:"))
    if path.startswith(("file:", "/")) and local.is_file():
        return True
    if not path.startswith(("file:", "/")) or not local.is_dir():
        return False
    return any(entry.name != "_delta_log" and not entry.name.startswith("part-") for entry in local.iterdir())


def _check_output(spec: Any, storage_options: dict[str, str] | None, report: dict[str, Any]) -> None:
    problems, output = report["problems"], spec.output
    if output.path is None:
        report["warnings"].append(
            f"output: catalog table {output.name} is not checked without Spark (a refresh checks it)"
        )
        return
    try:
        table = open_table(output.path, storage_options)
    except TableMissingError:
        report["output"] = {"path": output.path, "exists": False}
        if _holds_other_files(output.path):
            problems.append(
                _problem(
                    "output.path",
                    f"{output.path} is not a Delta table but already holds files; the engine only creates "
                    "its output in an empty or new location: choose another path",
                )
            )
        return
    except _READ_ERRORS as error:
        problems.append(_problem("output.path", f"cannot read the output {output.path}: {error}"))
        return
    metadata = table.metadata()
    recorded = metadata.configuration.get(OWNER_PROPERTY)
    report["output"] = {
        "path": output.path,
        "exists": True,
        "version": int(table.version()),
        "owner": recorded,
    }
    for side, info in report["inputs"].items():
        if info["table_id"] == str(metadata.id):
            problems.append(
                _problem(
                    "output.path",
                    f"the output {output.path} is the same Delta table as {side} ({info['path']}, table id "
                    f"{metadata.id}); write the output to a location of its own",
                )
            )
    check = check_output_owner(
        output.path,
        recorded,
        spec_owner(spec),
        adopts=spec.adopts_existing_output,
        refreshed_before=lambda: scan_output_log(table, output.path).progress is not None,
    )
    if check.refusal is not None:
        field, _, message = check.refusal.partition(": ")
        problems.append(_problem(field, message))
    elif spec.adopts_existing_output and recorded != spec_owner(spec):
        report["warnings"].append(
            f"output {output.path} will be taken over (adopt_existing_output): its first refresh rebuilds it"
        )


def validate_spec(spec: Any, storage_options: dict[str, str] | None = None) -> dict[str, Any]:
    """Check a spec and its tables without a JVM; every problem found, not only the first.

    Returns ``{"valid", "kind", "problems": [{"field", "message"}], "warnings": [str], "inputs": {side:
    {"path", "version", "table_id", "change_data_feed", "columns"}}, "output": {"path", "exists", ...}}``.
    A spec that does not load gives its one :class:`SpecError` as the problem (field ``spec``).
    """
    report: dict[str, Any] = {"valid": False, "kind": None, "problems": [], "warnings": [], "inputs": {}}
    try:
        loaded = load_spec(spec)
    except SpecError as error:
        report["problems"].append(_problem("spec", str(error)))
        return report
    report["kind"] = loaded.kind
    for side, ref in loaded.inputs().items():
        _check_input(loaded, side, ref, storage_options, report)
    _check_output(loaded, storage_options, report)
    report["valid"] = not report["problems"]
    return report


def uses_catalog_tables(spec: Any) -> bool:
    """Whether a spec names a table by catalog name (``name:``), which only Spark can resolve."""
    loaded = load_spec(spec)
    return any(ref.path is None for ref in [loaded.output, *loaded.inputs().values()])


def _last_progress(path: str, storage_options: dict[str, str] | None) -> Progress | None:
    try:
        return scan_output_log(open_table(path, storage_options), path).progress
    except TableMissingError:
        return None


def refresh_status_from_logs(spec: Any, storage_options: dict[str, str] | None = None) -> dict[str, Any]:
    """:func:`..runner.refresh_status` read from Delta logs alone: versions consumed per input, lag behind
    each high watermark, the last refresh. Tables must be given by path (:func:`uses_catalog_tables`).

    >>> refresh_status_from_logs("specs/orders_enriched.yaml")["inputs"]["left"]  # doctest: +SKIP
    {'path': '/w/orders', 'consumed_version': 4, 'high_watermark': 6, 'lag_versions': 2}
    """
    loaded = load_spec(spec)
    if uses_catalog_tables(loaded):
        raise SpecError("a spec with catalog tables (name:) needs Spark to read its status")
    latest: dict[str, tuple[str, int | None]] = {}
    for side, ref in loaded.inputs().items():
        try:
            latest[side] = (ref.path, int(open_table(ref.path, storage_options).version()))
        except TableMissingError:
            latest[side] = (ref.path, None)
    previous = _last_progress(loaded.output.path, storage_options)
    report = status_report(loaded.kind, loaded.output.path, latest, previous, spec_fingerprint(loaded))
    return {**report, "source": "delta_log"}
