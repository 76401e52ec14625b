"""Spec parsing and validation messages: no Spark needed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_provider_fkjoin.engine.core.errors import SpecError
from airflow_provider_fkjoin.engine.core.spec import ForeignKeyExpr, load_spec, spec_fingerprint


def fk_spec(**overrides: object) -> dict:
    spec: dict = {
        "kind": "foreign_key_join",
        "left": {"path": "/w/orders", "key": ["order_id"]},
        "right": {"path": "/w/customers", "key": ["customer_id"]},
        "foreign_key": ["customer_id"],
        "output": {"path": "/w/out"},
    }
    spec.update(overrides)
    return spec


def error_of(spec: object) -> str:
    with pytest.raises(SpecError) as info:
        load_spec(spec)  # type: ignore[arg-type]
    return str(info.value)


def test_minimal_spec_defaults() -> None:
    spec = load_spec(fk_spec())
    assert spec.how == "inner"
    assert spec.columns is None
    assert spec.left.key == ["order_id"]


def test_relative_paths_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SpecError, match=r"output\.path: table location 'out' is relative"):
        load_spec(fk_spec(output={"path": "out"}))


@pytest.mark.parametrize(
    ("written", "normalised"),
    [
        ("file:///w/out/", "/w/out"),
        ("file:/w/out", "/w/out"),
        ("//w//./x/../out", "/w/out"),
        ("s3a://bucket/w//out/", "s3a://bucket/w/out"),
        ("S3://bucket/w/out", "s3://bucket/w/out"),
    ],
)
def test_paths_are_normalised(written: str, normalised: str) -> None:
    assert load_spec(fk_spec(output={"path": written})).output.path == normalised


def test_fk_expression_accepts_one_or_many() -> None:
    one = load_spec(fk_spec(foreign_key={"expr": "CAST(cust AS BIGINT)"}))
    assert isinstance(one.foreign_key, ForeignKeyExpr)
    assert one.foreign_key.expressions == ["CAST(cust AS BIGINT)"]
    two = load_spec(
        fk_spec(right={"path": "/w/c", "key": ["a", "b"]}, foreign_key={"expr": ["x", "upper(y)"]})
    )
    assert two.foreign_key.expressions == ["x", "upper(y)"]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({}, "kind: is required"),
        (fk_spec(kind="hash_join"), "kind: unknown kind 'hash_join'"),
        (fk_spec(left={"path": "/w/orders"}), "left.key: is required"),
        (
            fk_spec(left={"path": "/w/orders", "key": []}),
            "left.key: expected a list of names (at least 1 item)",
        ),
        (fk_spec(right={"key": ["customer_id"]}), "right: give exactly one of 'path' or 'name'"),
        (fk_spec(how="outer"), "how: expected one of inner, left, got 'outer'"),
        (fk_spec(colums={"a": "l.a"}), "colums: is not a known field"),
        (fk_spec(foreign_key=["a", "b"]), "foreign_key has 2 part(s) but right.key ['customer_id'] has 1"),
        (fk_spec(foreign_key=[]), "foreign_key: needs at least one left column"),
        (fk_spec(columns={"order_id": "l.order_id"}), "['order_id'] are the output key"),
        (fk_spec(columns={}), "columns: is empty"),
        (
            fk_spec(left={"path": "/w/o", "key": ["a`b"]}),
            "left.key: 'a`b' is not a usable column",
        ),
        (fk_spec(left={"path": "/w/o", "key": ["_fkjoin_x"]}), "reserved for the engine"),
        (fk_spec(left={"path": "/w/o", "key": ["id", "id"]}), "lists a column twice"),
        (
            fk_spec(output={"name": "db.t; DROP TABLE x"}),
            "output.name: must be a catalog table name",
        ),
        (fk_spec(output={"path": "/w/orders"}), "output.path: the output is the same table as left"),
    ],
)
def test_errors_name_the_field_and_the_fix(spec: dict, expected: str) -> None:
    message = error_of(spec)
    assert expected in message


def test_not_a_mapping() -> None:
    assert "must be a mapping" in error_of(["kind"])


def test_yaml_and_json_files(tmp_path: Path) -> None:
    yaml_file = tmp_path / "spec.yaml"
    yaml_file.write_text(
        "kind: foreign_key_join\n"
        "left: {path: /w/orders, key: [order_id]}\n"
        "right: {path: /w/customers, key: [customer_id]}\n"
        "foreign_key: [customer_id]\n"
        "how: left\n"
        "columns:\n  customer_name: r.name\n"
        "output: {path: /w/out}\n"
    )
    json_file = tmp_path / "spec.json"
    json_file.write_text(json.dumps(fk_spec(how="left", columns={"customer_name": "r.name"})))
    from_yaml, from_json = load_spec(yaml_file), load_spec(str(json_file))
    assert from_yaml == from_json
    assert spec_fingerprint(from_yaml) == spec_fingerprint(from_json)


def test_missing_and_broken_files(tmp_path: Path) -> None:
    assert "does not exist" in error_of(tmp_path / "nope.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: [unclosed")
    assert "not valid YAML/JSON" in error_of(broken)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("just a string")
    assert "must hold a mapping" in error_of(scalar)


def test_fingerprint_changes_with_semantics_only() -> None:
    base = spec_fingerprint(load_spec(fk_spec()))
    assert spec_fingerprint(load_spec(fk_spec())) == base
    assert spec_fingerprint(load_spec(fk_spec(how="left"))) != base
    assert spec_fingerprint(load_spec(fk_spec(columns={"n": "r.name"}))) != base
