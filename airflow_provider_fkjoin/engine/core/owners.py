"""Who owns an output, and whether a refresh by a given spec may write it (pure Python, no Spark).

An output records its owner in the table property ``fkjoin.owner`` when it is created: a JSON object
with the spec's ``kind``, a hash of its inputs' identities (``spec``) and, when the spec names one, its
``owner`` (free text; the Airflow operators name the task, ``dag_id.task_id``). The rule:

* the same owner may write the output, whatever else it changed in its spec (a changed spec rebuilds);
* an output recorded without a named owner is its kind-and-inputs identity's: a spec with that identity
  that now names an owner claims it (the upgrade path), any other spec is refused;
* an output recorded with a named owner is refused to every other name, and to a spec naming none.

Both the Spark refresh (:mod:`..delta.ownership`) and the no-JVM noop check (:mod:`..deltalog.watermarks`)
decide with :func:`owner_verdict`, so they never disagree.

    >>> owner_verdict('{"kind": "foreign_key_join", "owner": "sales.orders", "spec": "3f1c"}',
    ...               '{"kind": "foreign_key_join", "owner": "ops.orders", "spec": "3f1c"}')
    OwnerVerdict(allowed=False, claim=False)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: The table property that records an output's owner.
OWNER_PROPERTY = "fkjoin.owner"


@dataclass(frozen=True)
class OwnerVerdict:
    """Whether the refresh may write the output, and whether it must record its owner first."""

    allowed: bool
    claim: bool


def spec_owner(spec: Any) -> str:
    """The ``fkjoin.owner`` value of a spec: its kind, a hash of its inputs' identities, its named owner.

    >>> spec_owner(fk_spec)
    '{"kind": "foreign_key_join", "owner": "sales.orders_enriched", "spec": "3f1c0a9e2b7d4c11"}'
    """
    inputs = sorted((side, ref.identity) for side, ref in spec.inputs().items())
    digest = hashlib.sha256(json.dumps([spec.kind, inputs]).encode()).hexdigest()[:16]
    named = getattr(spec.output, "owner", None)
    return json.dumps(
        {"kind": spec.kind, "spec": digest, **({"owner": named} if named else {})}, sort_keys=True
    )


def _parse(value: str) -> dict[str, Any]:
    try:
        parsed = json.loads(value)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def owner_verdict(recorded: str, owner: str) -> OwnerVerdict:
    """May a spec whose owner value is ``owner`` write an output that recorded ``recorded``?"""
    if recorded == owner:
        return OwnerVerdict(allowed=True, claim=False)
    was, now = _parse(recorded), _parse(owner)
    if was.get("owner"):
        return OwnerVerdict(allowed=was["owner"] == now.get("owner"), claim=True)
    same_identity = (was.get("kind"), was.get("spec")) == (now.get("kind"), now.get("spec"))
    return OwnerVerdict(allowed=same_identity and bool(was), claim=True)


def describe_owner(value: str) -> str:
    """An owner value as a person reads it.

    >>> describe_owner('{"kind": "foreign_key_join", "owner": "sales.orders", "spec": "3f1c"}')
    "owner 'sales.orders' (a foreign_key_join)"
    """
    parsed = _parse(value)
    if parsed.get("owner"):
        return f"owner {parsed['owner']!r} (a {parsed.get('kind')})"
    if parsed:
        return f"an unnamed {parsed.get('kind')} spec (spec id {parsed.get('spec')}, no output.owner)"
    return f"owner {value[:80]!r}"


@dataclass(frozen=True)
class OutputOwnerCheck:
    """What an existing output's recorded owner means for a spec: ``refusal`` is the error to raise (None:
    the spec may write it), ``claim`` whether its next commit must record the spec's owner."""

    claim: bool
    refusal: str | None = None


def check_output_owner(
    location: str,
    recorded: str | None,
    owner: str,
    *,
    adopts: bool,
    refreshed_before: Callable[[], bool],
) -> OutputOwnerCheck:
    """May the spec whose owner value is ``owner`` write the existing output at ``location``, which
    recorded ``recorded`` (None: no owner recorded)? ``refreshed_before`` says whether the output holds a
    refresh commit of this engine (asked only when nothing is recorded). The Spark refresh
    (:mod:`..delta.ownership`) and ``fkjoin validate`` (:mod:`..deltalog.validation`) both decide here.

    >>> check_output_owner("/w/x", None, "{}", adopts=False, refreshed_before=lambda: False).refusal[:40]
    'output.path: /w/x is a Delta table this '
    """
    if recorded == owner:
        return OutputOwnerCheck(claim=False)
    if adopts:
        return OutputOwnerCheck(claim=True)
    if recorded is not None:
        verdict = owner_verdict(recorded, owner)
        if verdict.allowed:
            return OutputOwnerCheck(claim=verdict.claim)
        return OutputOwnerCheck(
            claim=False,
            refusal=f"output.path: {location} belongs to {describe_owner(recorded)}, and this refresh is "
            f"by {describe_owner(owner)}; two specs writing one table would replace each other's rows. "
            "Give this spec its own output, or set adopt_existing_output: true to take the table over "
            "(its first refresh rebuilds it)",
        )
    if refreshed_before():
        # Created by this engine before outputs recorded their owner: claim it on the next commit.
        return OutputOwnerCheck(claim=True)
    return OutputOwnerCheck(
        claim=False,
        refusal=f"output.path: {location} is a Delta table this engine did not create; a refresh would "
        "replace its rows. Choose a new location, or set adopt_existing_output: true to take it over "
        "(its first refresh rebuilds it from the inputs)",
    )
