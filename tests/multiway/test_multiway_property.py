"""Property: any changes to 2 to 4 inputs of a ``multiway_join``, refreshed at any points, keep the output
equal to the N-way join recomputed from scratch (``multiway_model``) at the refresh's pinned versions, with
one net change per changed output key (per changed copy of a row when the output has no key) in its change
feed, and no column but the user's in the output.

Hypothesis draws tiny worlds: inputs ``a``..``d`` with primary keys 0..3 and one join key over a shared
domain {0, 1, 2, null}, so 1:1, 1:N and N:M buckets all happen and null join keys never match. Input ``a``
names its join column ``a_k`` and renames it (to ``k``, merging it with the other inputs' ``k``, or to a
column of its own) and renames a value column; input ``b`` drops fields (its join key, its primary key or a
value) with ``exclude_fields``; ``c`` and ``d`` may drop one. Values may be null. So the output's key takes
each of its three forms: a declared ``pkey`` (every shown input key plus ``a_value``, which may be null and
changes with the values), the columns showing every input's key, or none when ``b``'s key is dropped (a
multiset whose equal rows, nulls included, repeat when two ``b`` rows differ only in dropped fields).

The changes (inserts, updates of values or of the join key alone, deletes, identical rewrites, and a row
changing together with its partner in another input: both inserted, both updated, or one deleted while the
other changes) are cut into 1 to 4 refreshes after the first (full) one. Each refresh's input changes are
batched: per input at most one DELETE and one MERGE, so a key can be deleted and re-inserted within one
refresh. Each incremental refresh runs under a ``refresh_strategy`` drawn for it (``auto``, ``incremental``
or ``recompute``; the setting is not fingerprinted, so it may change between refreshes): every plan must
write the same rows and the same change feed, so one run of examples covers the three without repeating
any refresh. The recompute plan serves a keyed output written as net changes (a ``pkey`` that may hold
nulls compares null-safe); for the others (no key, ``write_path: merge``) the result records the
fallback to the incremental plan.

Every refresh is checked by ``support.multiway_worlds.World.refresh`` (output = model, clean change feed,
result counts = change feed) and here: the mode, one output commit per refresh, the pinned versions are the
inputs' latest and hold what the model joined, the output's change feed of the refresh is exactly the net
change between the model's join before and after it, and the result's counts are the model's diff (per
output key, or per copy of a row when the output has no key); and the plan that ran is the one asked for.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from helpers import CDF_META, assert_clean_changes, read_changes, small_refresh_bound, table_version
from hypothesis import example, given
from hypothesis import strategies as st
from multiway_model import Row
from pyspark.sql import SparkSession
from support.multiway_worlds import World, as_rows, frozen, model_at, net_counts, output_key

NAMES = "abcd"
KEYS = [0, 1, 2, 3]  # primary keys of every input
JOIN_KEYS = [0, 1, 2, 0, 1, 2, None]  # the shared join-key domain (a null one time in seven)
VALUES = [0, 1, 2, None]  # small, so identical rewrites happen; null, so null values repeat and compare
TAGS = ["x", "y"]
#: The ``refresh_strategy`` settings an incremental refresh is drawn under.
STRATEGIES = ["auto", "incremental", "recompute"]
#: Examples per run: each builds its own Delta tables and runs 2 to 5 refreshes (a few minutes in all).


# ------------------------------------------------------------------------------------------- the world


def join_column(name: str) -> str:
    """Input ``a`` joins on ``a_k`` (renamed by an alias); every other input on ``k``."""
    return "a_k" if name == "a" else "k"


def schema(name: str) -> str:
    return f"{name}_id INT, {join_column(name)} INT, {name}_v INT, {name}_s STRING"


def make_row(name: str, key: int, jk: int | None, v: int, s: str) -> Row:
    return {f"{name}_id": key, join_column(name): jk, f"{name}_v": v, f"{name}_s": s}


def spec_extra(plan: dict[str, Any], root: Path) -> dict[str, Any]:
    """The spec's output fields: with ``pkey``, every shown input key and ``a_value``, enforced when it
    holds every input's key (else its repeats are only counted)."""
    if plan["pkey"] is None:
        return {}
    names = NAMES[: plan["inputs"]]
    shown = [f"{n}_id" for n in names if n != "b" or "b_id" not in plan["b_excluded"]]
    return {
        "output": {"path": str(root / "out"), "pkey": [*shown, "a_value"]},
        "enforce_pkey": len(shown) == len(names),
    }


def spec_inputs(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """The spec's inputs (without paths): ``a`` with aliases, ``b`` with exclude_fields, ``c``/``d`` maybe."""
    inputs = []
    for name in NAMES[: plan["inputs"]]:
        item: dict[str, Any] = {"name": name, "key": [f"{name}_id"], "join_keys": [join_column(name)]}
        if name == "a":
            item["aliases"] = [{"from": "a_k", "to": plan["a_join_alias"]}, {"from": "a_v", "to": "a_value"}]
        elif name == "b":
            item["exclude_fields"] = list(plan["b_excluded"])
        elif name in plan["excluded"]:
            item["exclude_fields"] = [f"{name}_s"]
        inputs.append(item)
    return inputs


# ----------------------------------------------------------------------------------------- the changes


def apply_changes(world: World, ops: list[dict[str, Any]]) -> bool:
    """Apply one refresh's ops: first in Python, then per input one DELETE (keys that existed before and
    were deleted, re-inserted or not) and one MERGE (keys upserted that are present at the end). Returns
    whether any Delta commit was made.

    ``move``, ``touch``, ``delete`` and the partner ops act on an existing row: their ``key`` indexes the
    input's present keys (modulo their number), and they do nothing when the input is empty.
    """
    staged = {name: dict(rows) for name, rows in world.tables.items()}
    upserted: dict[str, set[tuple]] = {name: set() for name in staged}
    deleted: dict[str, set[tuple]] = {name: set() for name in staged}

    def existing(name: str, index: int) -> Row | None:
        present = sorted(staged[name])
        return staged[name][present[index % len(present)]] if present else None

    def put(name: str, key: int, jk: int | None, v: int, s: str) -> None:
        staged[name][(key,)] = make_row(name, key, jk, v, s)
        upserted[name].add((key,))

    def drop(name: str, row: Row) -> None:
        key = (row[f"{name}_id"],)
        staged[name].pop(key)
        deleted[name].add(key)

    def jk_of(name: str, row: Row) -> int | None:
        return row[join_column(name)]

    def change_partner(row_name: str, jk: int | None, name: str, op: dict[str, Any]) -> None:
        """The partner of a row with join key ``jk`` in input ``name`` changes: a present one (same join
        key) gets new values, else one is inserted with that join key."""
        partners = sorted(
            (k for k, r in staged[name].items() if jk is not None and jk_of(name, r) == jk), key=repr
        )
        if partners:
            partner = staged[name][partners[op["partner_key"] % len(partners)]]
            put(name, partner[f"{name}_id"], jk, op["v"], op["s"])
        else:
            put(name, op["partner_key"], jk, op["v"], op["s"])

    for op in ops:
        kind = op["op"]
        if kind == "upsert":  # an insert, or an update of values and join key
            put(op["input"], op["key"], op["jk"], op["v"], op["s"])
            continue
        if kind == "pair":  # a row and its partner inserted or updated together, onto one join key
            first, second = op["inputs"]
            put(first, op["key"], op["jk"], op["v"], op["s"])
            put(second, op["partner_key"], op["jk"], op["v"], op["s"])
            continue
        name = op["input"] if "input" in op else op["inputs"][0]
        row = existing(name, op["key"])
        if row is None:
            continue
        key, jk, v, s = row[f"{name}_id"], jk_of(name, row), row[f"{name}_v"], row[f"{name}_s"]
        if kind == "move":  # the join key only
            put(name, key, op["jk"], v, s)
        elif kind == "touch":  # the values only (fans out to every output row of the row)
            put(name, key, jk, op["v"], op["s"])
        elif kind == "delete":
            drop(name, row)
        elif kind == "touch_pair":  # a joined row and its partner both change values
            put(name, key, jk, op["v"], op["s"])
            change_partner(name, jk, op["inputs"][1], op)
        elif kind == "delete_with_partner":  # a row deleted while its partner changes
            drop(name, row)
            change_partner(name, jk, op["inputs"][1], op)
        else:
            raise AssertionError(f"unknown op {op}")

    committed = False
    for name in staged:
        gone = sorted(k[0] for k in deleted[name] if k in world.tables[name])
        written = [staged[name][k] for k in sorted(upserted[name]) if k in staged[name]]
        if gone:
            world.delete(name, gone)
            committed = True
        if written:
            world.upsert(name, written)
            committed = True
    assert world.tables == staged, "the batched commits must leave the staged state"
    return committed


# ------------------------------------------------------------------------------------------ strategies

keys = st.sampled_from(KEYS)
join_keys = st.sampled_from(JOIN_KEYS)
values = st.sampled_from(VALUES)
tags = st.sampled_from(TAGS)


def ops_for(names: str) -> st.SearchStrategy[dict[str, Any]]:
    one = st.sampled_from(list(names))
    two = st.lists(st.sampled_from(list(names)), min_size=2, max_size=2, unique=True).map(tuple)

    def op(kind: str, **fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
        return st.fixed_dictionaries({"op": st.just(kind), **fields})

    return st.one_of(
        op("upsert", input=one, key=keys, jk=join_keys, v=values, s=tags),
        op("move", input=one, key=keys, jk=join_keys),
        op("touch", input=one, key=keys, v=values, s=tags),
        op("delete", input=one, key=keys),
        op("pair", inputs=two, key=keys, partner_key=keys, jk=join_keys, v=values, s=tags),
        op("touch_pair", inputs=two, key=keys, partner_key=keys, v=values, s=tags),
        op("delete_with_partner", inputs=two, key=keys, partner_key=keys, v=values, s=tags),
    )


@st.composite
def plans(draw: st.DrawFn) -> dict[str, Any]:
    count = draw(st.integers(2, 4))
    names = NAMES[:count]
    cells = st.tuples(join_keys, values, tags)
    plan = {
        "inputs": count,
        "a_join_alias": draw(st.sampled_from(["k", "a_join"])),
        "b_excluded": draw(
            st.lists(st.sampled_from(["b_s", "k", "b_id"]), min_size=1, max_size=2, unique=True)
        ),
        "excluded": [name for name in names[2:] if draw(st.booleans())],
        "pkey": draw(st.sampled_from([None, "keys"])),
        "write_path": draw(st.sampled_from(["auto", "merge"])),
        "initial": {name: draw(st.dictionaries(keys, cells, min_size=2, max_size=4)) for name in names},
        "refreshes": draw(st.lists(st.lists(ops_for(names), min_size=1, max_size=4), min_size=1, max_size=4)),
    }
    # one setting per refresh after the first (a full one, which has a single plan)
    count_refreshes = len(plan["refreshes"])
    plan["strategies"] = draw(
        st.lists(st.sampled_from(STRATEGIES), min_size=count_refreshes, max_size=count_refreshes)
    )
    return plan


def recomputable(plan: dict[str, Any], keyless: bool) -> bool:
    """Whether the recompute plan serves ``plan``'s output (docs/kinds/multiway-join.md): it needs a key
    (a ``pkey`` that may hold nulls, ``a_value`` here, compares null-safe) and the net-change commit (not
    ``write_path: merge``). Otherwise a refresh asked to recompute runs the incremental plan."""
    return not keyless and plan["write_path"] != "merge"


def assert_feed_is_the_models_change(
    spark: SparkSession,
    world: World,
    before: int | None,
    after: int,
    old: dict[tuple, Row],
    new: dict[tuple, Row],
) -> None:
    """The output's change feed over one refresh (versions ``before``+1 .. ``after``) is exactly the net
    change between the model's join ``old`` and ``new``: per output key one insert, delete or update from
    the model's old row to its new one; for a keyless output, the copies of rows the model lost deleted and
    those it gained inserted, nothing else."""
    out = world.spec["output"]["path"]
    key = output_key(world.spec)
    if key is not None:
        assert_clean_changes(
            spark, out, key, before, after, before_rows=old.values(), after_rows=new.values()
        )
        return
    start = 0 if before is None else before + 1
    changes = read_changes(spark, out, start, after) if after >= start else []
    feed: dict[str, Counter] = {"insert": Counter(), "delete": Counter()}
    for change in changes:
        assert change["_change_type"] in feed, f"a keyless output's feed holds {change['_change_type']}"
        feed[change["_change_type"]][frozen({n: v for n, v in change.items() if n not in CDF_META})] += 1
    gained, lost = as_rows(new) - as_rows(old), as_rows(old) - as_rows(new)
    assert (feed["insert"], feed["delete"]) == (gained, lost), "the feed is not the model's change"


# ------------------------------------------------------------------------------------------------ test

#: Four inputs whose rows change together with their partners (the telescoping sum's double-count traps),
#: refreshed by the incremental plan.
DOUBLE_COUNT_TRAPS = {
    "inputs": 4,
    "a_join_alias": "k",
    "b_excluded": ["k", "b_s"],
    "excluded": ["d"],
    "pkey": None,
    "write_path": "auto",
    "initial": {
        "a": {0: (0, 0, "x"), 1: (1, 1, "y"), 2: (None, 0, "x")},
        "b": {0: (0, 0, "x"), 1: (0, 1, "x"), 2: (1, 0, "y")},
        "c": {0: (0, 0, "x"), 1: (0, 1, "y"), 2: (2, 0, "x")},
        "d": {0: (0, 0, "x"), 1: (1, 0, "x"), 2: (0, 2, "y")},
    },
    "refreshes": [
        [  # a joined row and its partner both change; a join-key move; a null join key
            {"op": "touch_pair", "inputs": ("a", "b"), "key": 0, "partner_key": 1, "v": 2, "s": "y"},
            {"op": "move", "input": "c", "key": 2, "jk": 1},
            {"op": "upsert", "input": "b", "key": 3, "jk": None, "v": 1, "s": "x"},
        ],
        [  # a delete and its partner's update; an insert with its partners; delete + re-insert of a key
            {"op": "delete_with_partner", "inputs": ("d", "c"), "key": 0, "partner_key": 0, "v": 1, "s": "x"},
            {"op": "pair", "inputs": ("a", "d"), "key": 3, "partner_key": 3, "jk": 2, "v": 0, "s": "x"},
            {"op": "pair", "inputs": ("b", "c"), "key": 3, "partner_key": 3, "jk": 2, "v": 0, "s": "y"},
            {"op": "delete", "input": "a", "key": 1},
            {"op": "upsert", "input": "a", "key": 1, "jk": 0, "v": 1, "s": "y"},
        ],
    ],
    "strategies": ["incremental", "incremental"],
}
#: The same changes, refreshed by the recompute plan: only the rows that differ are committed.
RECOMPUTED_TRAPS = {**DOUBLE_COUNT_TRAPS, "strategies": ["recompute", "recompute"]}


#: A keyless output (``b``'s key dropped): ``b`` rows 0 and 1 differ only in dropped fields, so each ``a`` row
#: on join key 0 shows twice, nulls included; one copy changes, then the other goes, then two come back.
EQUAL_ROWS = {
    "inputs": 2,
    "a_join_alias": "k",
    "b_excluded": ["b_id", "b_s"],
    "excluded": [],
    "pkey": None,
    "write_path": "merge",
    "initial": {
        "a": {0: (0, None, "x"), 1: (0, 1, "y"), 2: (1, None, "x")},
        "b": {0: (0, None, "x"), 1: (0, None, "y"), 2: (1, 2, "x")},
    },
    "refreshes": [
        [{"op": "touch", "input": "b", "key": 1, "v": 1, "s": "x"}],
        [
            {"op": "delete", "input": "b", "key": 0},
            {"op": "touch", "input": "a", "key": 0, "v": None, "s": "x"},
        ],
        [
            {"op": "upsert", "input": "b", "key": 0, "jk": 0, "v": None, "s": "x"},
            {"op": "upsert", "input": "b", "key": 3, "jk": 0, "v": None, "s": "y"},
            {"op": "upsert", "input": "b", "key": 1, "jk": 0, "v": None, "s": "x"},
        ],
    ],
    "strategies": ["recompute", "auto", "incremental"],  # no key: a recompute falls back
}

#: A declared pkey holding every input's key and ``a_value``: a value change moves a row to another pkey
#: (a delete and an insert), and a null ``a_value`` is a pkey value like any other.
PKEY_MOVES = {
    "inputs": 3,
    "a_join_alias": "a_join",
    "b_excluded": ["b_s"],
    "excluded": [],
    "pkey": "keys",
    "write_path": "auto",
    "initial": {
        "a": {0: (0, None, "x"), 1: (1, 1, "y")},
        "b": {0: (0, 0, "x"), 1: (1, None, "y")},
        "c": {0: (0, 0, "x"), 1: (1, 1, "x")},
    },
    "refreshes": [
        [
            {"op": "touch", "input": "a", "key": 0, "v": 2, "s": "x"},
            {"op": "touch", "input": "b", "key": 1, "v": 0, "s": "x"},
        ],
        [
            {"op": "touch", "input": "a", "key": 1, "v": None, "s": "y"},
            {"op": "move", "input": "c", "key": 1, "jk": 0},
        ],
    ],
    "strategies": ["recompute", "incremental"],  # a key that may hold nulls: a recompute falls back
}


@given(plan=plans(), adaptive=st.booleans())
@example(plan=DOUBLE_COUNT_TRAPS, adaptive=False).via("four inputs, partners changing together, N:M buckets")
@example(plan=RECOMPUTED_TRAPS, adaptive=False).via("the same changes, recomputed")
@example(plan=EQUAL_ROWS, adaptive=False).via("a keyless output whose equal rows repeat, with nulls")
@example(plan=PKEY_MOVES, adaptive=False).via("a pkey that changes with the values, and holds nulls")
def test_refreshes_equal_the_model_recomputed(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory, plan: dict[str, Any], adaptive: bool
) -> None:
    with small_refresh_bound(spark, adaptive):
        names = NAMES[: plan["inputs"]]
        root: Path = tmp_path_factory.mktemp("multiway_prop")
        rows = {
            name: [make_row(name, k, jk, v, s) for k, (jk, v, s) in plan["initial"][name].items()]
            for name in names
        }
        world = World.create(
            spark, root, spec_inputs(plan), {n: schema(n) for n in names}, rows, **spec_extra(plan, root)
        )
        keyless = output_key(world.spec) is None
        previous: dict[tuple, Row] = {}

        def refresh(want_mode: str, strategy: str = "auto") -> None:
            nonlocal previous
            before = world.versions[-1] if world.versions else None
            world.spec["refresh_strategy"] = strategy
            result = world.refresh(write_path=plan["write_path"])  # output = model, clean change feed
            shown = f"{result['mode']} ({result['reason']}), warnings {result['warnings']}"
            assert result["mode"] == want_mode, f"expected a {want_mode} refresh, got {shown}"
            latest = {name: table_version(spark, world.path(name)) for name in names}
            pinned = {name: result["inputs"][name]["to_version"] for name in names}
            assert pinned == latest, "a refresh pins every input at its latest version"
            now = world.expected()
            assert model_at(spark, world, pinned) == now, (
                "the inputs at the pinned versions are what the model joined"
            )
            output = world.versions[-1]
            assert result["output"]["version"] == output
            if want_mode == "incremental":
                assert output == before + 1, "an incremental refresh is one output commit"
                plan_ran = result["strategy"]
                assert strategy == "auto" or plan_ran["chosen"] == strategy, plan_ran
                if plan_ran["chosen"] == "recompute":
                    served = "fallback" not in plan_ran
                    assert served == recomputable(plan, keyless), f"{plan_ran}; {shown}"
                # a keyless output is written as net changes even when MERGE is asked for (with a warning)
                path = "merge" if plan["write_path"] == "merge" and not keyless else "net_changes"
                assert result["write_path"] == path, shown
            elif want_mode == "noop":
                assert output == before
            assert_feed_is_the_models_change(spark, world, before, output, previous, now)
            counts = {kind: result["rows"][kind] for kind in ("inserted", "updated", "deleted")}
            assert counts == net_counts(world.spec, previous, now), (
                f"result counts vs the model's diff; {shown}"
            )
            previous = now

        refresh("full")
        for ops, strategy in zip(plan["refreshes"], plan["strategies"], strict=True):
            committed = apply_changes(world, ops)
            refresh("incremental" if committed else "noop", strategy)
