"""From a dict, a YAML or JSON file or Joinery's YAML to a validated spec: the union of every kind
(dispatched on ``kind``, then ``mode``), :data:`KIND_NAMES`, the errors that name the field and the fix,
and what a loaded spec is read for (:func:`as_self_join`, :func:`spec_expressions`).

It is the one module that knows every kind, so it sits above the kinds' modules.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from ..errors import SpecError
from ..joinery import from_joinery, is_joinery
from .keyed import ForeignKeyExpr, ForeignKeyJoinSpec, GlobalTableBootstrapSpec, StreamTableJoinSpec
from .multiway import MultiWayJoinSpec
from .windowed import SelfJoinSpec, WindowedJoinSpec, WindowedTableJoinSpec

WindowedJoinModes = Annotated[WindowedJoinSpec | WindowedTableJoinSpec, Field(discriminator="mode")]


AnySpec = (
    ForeignKeyJoinSpec
    | GlobalTableBootstrapSpec
    | StreamTableJoinSpec
    | WindowedJoinSpec
    | WindowedTableJoinSpec
    | SelfJoinSpec
    | MultiWayJoinSpec
)
Spec = Annotated[
    ForeignKeyJoinSpec
    | GlobalTableBootstrapSpec
    | StreamTableJoinSpec
    | WindowedJoinModes
    | SelfJoinSpec
    | MultiWayJoinSpec,
    Field(discriminator="kind"),
]
_SPEC_ADAPTER: TypeAdapter[AnySpec] = TypeAdapter(Spec)
#: The spec kinds' names, for messages (the registry of their algorithms is ``kinds.KINDS``).
KIND_NAMES = (
    "foreign_key_join",
    "global_table_bootstrap",
    "stream_table_join",
    "windowed_join",
    "self_join",
    "multiway_join",
)

#: How a refresh may write its output (``run_spec(write_path=...)``, ``fkjoin run --write-path``, the
#: operators' ``write_path``): ``auto`` commits net changes without MERGE where the engine can prove them
#: right (:mod:`...write.net_changes`), ``merge`` always uses Delta's MERGE.
WRITE_PATHS = ("auto", "merge")


def _field_path(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif item in KIND_NAMES or item in {
            "list[str]",
            "ForeignKeyExpr",
            "ChangelogFormat",
            "stream",
            "table",
        }:
            continue
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts) or "spec"


def _format_errors(error: ValidationError) -> str:
    lines = []
    seen: set[str] = set()
    for item in error.errors():
        path = _field_path(tuple(item["loc"]))
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "missing":
            message = "is required"
        elif item["type"] == "extra_forbidden":
            message = "is not a known field (check the spelling)"
        elif item["type"] == "union_tag_invalid" and "mode" in str(item.get("ctx", {}).get("discriminator")):
            path = "mode"
            message = f"unknown mode {item.get('input', {}).get('mode')!r}; expected stream or table"
        elif item["type"] == "union_tag_not_found" and "mode" in str(
            item.get("ctx", {}).get("discriminator")
        ):
            path, message = "mode", "is required: stream or table"
        elif item["type"] == "union_tag_invalid":
            path = "kind"
            message = (
                f"unknown kind {item.get('input', {}).get('kind')!r}; expected one of {', '.join(KIND_NAMES)}"
            )
        elif item["type"] == "union_tag_not_found":
            path, message = "kind", f"is required; one of {', '.join(KIND_NAMES)}"
        names_a_field = re.match(r"^[A-Za-z_][\w.\[\]]*: ", message) is not None
        line = message if path == "spec" and names_a_field else f"{path}: {message}"
        if line not in seen:
            seen.add(line)
            lines.append(line)
    return "invalid spec: " + "; ".join(lines)


def read_spec_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML or JSON spec file into a dict (JSON is YAML, so one parser serves both)."""
    file = Path(path)
    if not file.is_file():
        raise SpecError(f"spec file {str(file)!r} does not exist")
    try:
        data = yaml.safe_load(file.read_text())
    except yaml.YAMLError as exc:
        raise SpecError(f"spec file {str(file)!r} is not valid YAML/JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise SpecError(f"spec file {str(file)!r} must hold a mapping with a 'kind'")
    return data


def load_spec(spec: AnySpec | dict[str, Any] | str | Path) -> AnySpec:
    """Turn a dict, a spec object, or a path to a YAML/JSON file into a validated spec."""
    if isinstance(spec, BaseModel):
        return spec
    data = read_spec_file(spec) if isinstance(spec, str | Path) else spec
    if not isinstance(data, dict):
        raise SpecError(f"a spec must be a mapping, not {type(data).__name__}")
    if is_joinery(data):
        data = from_joinery(data)
    try:
        return _SPEC_ADAPTER.validate_python(data)
    except ValidationError as exc:
        raise SpecError(_format_errors(exc)) from None


def as_self_join(spec: AnySpec | dict[str, Any] | str | Path) -> SelfJoinSpec:
    """The ``self_join`` a spec runs as: a ``self_join`` as it is, or a stream-mode ``windowed_join`` of one
    table with itself rewritten (KIP-862's rewrite, done where a DAG asks for it). A SpecError lists every
    reason the rewrite does not apply, so a DAG author sees what makes the two sides differ.

    >>> txns = {"path": "/w/card_txns", "key": ["card_id"], "time": "txn_at"}
    >>> as_self_join({"kind": "windowed_join", "mode": "stream", "left": txns, "right": txns,
    ...               "window": {"before": "10m", "after": "10m"}, "output": {"path": "/w/pairs"},
    ...               "columns": {"txn_id": "l.txn_id", "paired_txn_id": "r.txn_id"}}).kind
    'self_join'
    """
    loaded = load_spec(spec)
    if isinstance(loaded, SelfJoinSpec):
        return loaded
    if not isinstance(loaded, WindowedJoinSpec):
        mode = getattr(loaded, "mode", None)
        shown = f"{loaded.kind} (mode {mode})" if mode else loaded.kind
        raise SpecError(
            f"kind: a {shown} spec cannot run as a self_join; give a self_join spec, or a windowed_join "
            "with mode: stream and the same table as left and right"
        )
    reasons = loaded.self_join_obstacles()
    if reasons:
        raise SpecError("windowed_join cannot run as a self_join: " + "; ".join(reasons))
    fields = loaded.model_dump(exclude={"kind", "mode", "left", "right", "how", "late_unmatched", "optimize"})
    rewritten = load_spec({**fields, "kind": "self_join", "input": loaded.left.model_dump()})
    assert isinstance(rewritten, SelfJoinSpec)
    return rewritten


def spec_expressions(spec: BaseModel) -> dict[str, str]:
    """Every Spark SQL expression in a spec by field path: what expression checks and errors name.

    >>> spec_expressions(load_spec({..., "foreign_key": {"expr": "CAST(c AS BIGINT)"},
    ...                             "columns": {"n": "r.name"}}))
    {'foreign_key.expr[0]': 'CAST(c AS BIGINT)', 'columns.n': 'r.name'}
    """
    found: dict[str, str] = {}
    for field in ("foreign_key", "key_mapper"):
        value = getattr(spec, field, None)
        if isinstance(value, ForeignKeyExpr):
            found.update({f"{field}.expr[{i}]": text for i, text in enumerate(value.expressions)})
    for name, text in (getattr(spec, "columns", None) or {}).items():
        found[f"columns.{name}"] = text
    return found
