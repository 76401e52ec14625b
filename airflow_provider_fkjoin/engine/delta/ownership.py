"""Output ownership: a refresh writes only a table this engine created for the same spec.

Checked once per refresh, before any data is read or written, for every kind (``run_spec`` calls it):

* the output is not an input, not inside one and does not contain one: locations are compared after
  normalising them (:mod:`..core.locations`), catalog tables by their resolved location, and existing
  tables by their Delta table id, so no spelling of an input's location gets past it;
* an existing output carries the table property ``fkjoin.owner`` naming the kind and the spec identity
  that created it; another spec is refused, and so is a Delta table this engine did not create, unless the
  spec says ``adopt_existing_output: true``;
* a location that holds files but no Delta table is always refused.

The owner is the spec's ``output.owner`` when it names one (the Airflow operators name the task), else
the kind and the identities of its inputs (:mod:`..core.owners` has the rule): the same owner editing its
spec (``columns``, ``how``, even its inputs) keeps the table and the next refresh rebuilds it, while
another owner pointed at the table is refused.

    >>> check_ownership(spark, load_spec({... "output": {"path": "/w/orders"}}))
    SpecError: output.path: /w/orders is a Delta table this engine did not create ...
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from ..core.errors import SpecError
from ..core.locations import is_within
from ..core.owners import check_output_owner, spec_owner
from ..delta.output_log import read_progress
from .tables import OWNER_PROPERTY, DeltaHandle


@dataclass(frozen=True)
class Ownership:
    """Who owns the output and whether this refresh must record it (``claim``) before it commits."""

    owner: str
    claim: bool


def check_ownership(spark: SparkSession, spec: Any) -> Ownership:
    """Refuse an output this spec must not write (SpecError naming the table and the fix)."""
    output = DeltaHandle(spark, spec.output, "output")
    inputs = {side: DeltaHandle(spark, ref, side) for side, ref in spec.inputs().items()}
    owner = spec_owner(spec)
    out_identity = output.resolved_identity()
    for side, handle in inputs.items():
        identity = handle.resolved_identity()
        if is_within(out_identity, identity) or is_within(identity, out_identity):
            raise SpecError(
                f"output.path: the output {output.location} and {side} table {handle.location} are the same "
                "place, or one is inside the other: a refresh would overwrite or corrupt the input; "
                "write the output to a location of its own"
            )
    state = output.metadata()
    if state is None:
        if output.holds_other_files():
            raise SpecError(
                f"output.path: {output.location} is not a Delta table but already holds files; the engine "
                "only creates its output in an empty or new location: choose another path"
            )
        return Ownership(owner, claim=False)
    for side, handle in inputs.items():
        metadata = handle.metadata()
        if metadata is not None and metadata.table_id == state.table_id:
            raise SpecError(
                f"output.path: the output {output.location} is the same Delta table as {side} "
                f"({handle.location}, table id {state.table_id}); write the output to a location of its own"
            )
    check = check_output_owner(
        output.location,
        state.properties.get(OWNER_PROPERTY),
        owner,
        adopts=spec.adopts_existing_output,
        refreshed_before=lambda: read_progress(output) is not None,
    )
    if check.refusal is not None:
        raise SpecError(check.refusal)
    return Ownership(owner, claim=check.claim)
