"""From a dict, a YAML or JSON file or Joinery's YAML to a validated spec: the union of every kind
(dispatched on ``kind``, then ``mode``), :data:`KIND_NAMES`, the errors that name the field and the fix,
and what a loaded spec is read for (:func:`as_self_join`, :func:`spec_expressions`).

It is the one module that knows every kind, so it sits above the kinds' modules.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from ..errors import SpecError
from ..joinery import from_joinery, is_joinery
from .keyed import ForeignKeyExpr, ForeignKeyJoinSpec, GlobalTableBootstrapSpec, StreamTableJoinSpec
from .messages import describe_errors, flow_yaml
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


def _kinds() -> dict[str, Any]:
    """Each kind's model by the tag pydantic puts first in an error's location (for ``windowed_join``, a
    mapping of its modes' tags to their models)."""
    found: dict[str, Any] = {}
    for model in typing.get_args(AnySpec):
        (kind,) = typing.get_args(model.model_fields["kind"].annotation)
        mode = model.model_fields.get("mode")
        if mode is None:
            found[kind] = model
        else:
            found.setdefault(kind, {})[typing.get_args(mode.annotation)[0]] = model
    return found


_KINDS = _kinds()


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
        raise SpecError(
            f"a spec must be a mapping of fields (kind: ..., output: ...), not {flow_yaml(data)[:80]}"
        )
    if is_joinery(data):
        data = from_joinery(data)
    try:
        return _SPEC_ADAPTER.validate_python(data)
    except ValidationError as exc:
        raise SpecError(describe_errors(exc, data, _KINDS, KIND_NAMES)) from None


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
