"""Every spec field is described where it is defined, the published JSON Schema is the models' own, it
accepts the specs the docs show and refuses bad ones, and describing the fields changed no spec's
fingerprint (an output would otherwise rebuild). No Spark needed.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import pytest
import yaml
from pydantic import BaseModel, Field

from airflow_provider_fkjoin.engine.core.spec import (
    load_spec,
    spec_field_hashes,
    spec_fingerprint,
    spec_json_schema,
    spec_json_schema_text,
    spec_model_classes,
)

REPO = Path(__file__).resolve().parents[2]
SCHEMA_FILE = REPO / "docs" / "spec.schema.json"
REGENERATE = "python -m airflow_provider_fkjoin.engine.core.spec > docs/spec.schema.json"

CHANGELOG = {
    "op_column": "op",
    "order_by": ["lsn"],
    "ops": {"create": "I", "update": "U", "delete": "D", "log": "R"},
    "columns": ["name", "price"],
}
#: One spec of each kind (and mode), with most optional fields set.
SAMPLES: dict[str, dict[str, Any]] = {
    "foreign_key_join": {
        "kind": "foreign_key_join",
        "left": {"path": "/w/orders", "key": ["order_id"]},
        "right": {"path": "/w/products_cdc", "key": ["product_id"], "changelog": CHANGELOG},
        "foreign_key": {"expr": "CAST(product AS BIGINT)"},
        "how": "left",
        "columns": {"product_name": "r.name", "qty": "l.qty"},
        "output": {"path": "/w/out_fk", "owner": "dag.task"},
    },
    "global_table_bootstrap": {
        "kind": "global_table_bootstrap",
        "source": {"name": "db.products_cdc", "key": ["product_id"], "changelog": CHANGELOG},
        "output": {"path": "/w/products_global"},
        "broadcast_warn_bytes": 1048576,
    },
    "stream_table_join": {
        "kind": "stream_table_join",
        "stream": {"path": "/w/orders_stream", "key": ["order_id"]},
        "table": {"path": "/w/products_global", "key": ["product_id"]},
        "key_mapper": ["product_id"],
        "how": "left",
        "columns": {"n": "t.name"},
        "allow_unbootstrapped_table": True,
        "output": {"path": "/w/out_st"},
    },
    "windowed_join mode: stream": {
        "kind": "windowed_join",
        "mode": "stream",
        "left": {"path": "/w/impressions", "key": ["ad_id"], "time": "shown_at", "order_by": ["offset"]},
        "right": {"path": "/w/clicks", "key": ["ad_id"], "time": "clicked_at"},
        "window": {"before": "1h", "after": 3600000, "grace": "10m"},
        "how": "outer",
        "late_unmatched": "emit_immediately",
        "columns": {"ad_id": "coalesce(l.ad_id, r.ad_id)"},
        "output": {"path": "/w/ad_clicks"},
    },
    "windowed_join mode: table": {
        "kind": "windowed_join",
        "mode": "table",
        "left": {"path": "/w/errors_per_min", "key": ["service"], "window": {"start": "ws", "end": "we"}},
        "right": {
            "path": "/w/errors_per_min",
            "key": ["service"],
            "window": {"start": "ws", "end": "we", "offset": "-7d"},
        },
        "how": "left",
        "columns": {"errors_now": "l.errors", "errors_week_ago": "r.errors"},
        "output": {"path": "/w/errors_vs"},
    },
    "self_join": {
        "kind": "self_join",
        "input": {"path": "/w/atm", "key": ["account_id"], "time": "ts", "order_by": "offset"},
        "window": {"before": "10m", "after": "10m", "grace": "1m"},
        "columns": {"account_id": "l.account_id", "atm2": "r.atm"},
        "output": {"path": "/w/atm_pairs"},
    },
    "multiway_join": {
        "kind": "multiway_join",
        "inputs": [
            {
                "name": "review",
                "path": "/w/reviews",
                "key": ["review_id"],
                "join_keys": ["biz_id"],
                "exclude_fields": ["content"],
            },
            {
                "name": "business",
                "table": "db.business",
                "key": "business_id",
                "join_keys": ["business_id"],
                "aliases": [{"from": "business_id", "to": "biz_id"}],
                "changelog": CHANGELOG,
            },
        ],
        "output": {"path": "/w/biz_reviews", "pkey": ["biz_id", "review_id"]},
        "enforce_pkey": False,
        "max_rows_per_join_key": 10,
    },
}
#: Each sample's fingerprint and a digest of its per-field hashes, recorded before the fields had
#: descriptions (main at 66c7074). Outputs store both in their commits: a change here rebuilds every output.
RECORDED = {
    "foreign_key_join": ("aab632f678a2273d", "b76b56b0fa93a9d0"),
    "global_table_bootstrap": ("4220968d62e63167", "686218e9b3a0947b"),
    "stream_table_join": ("c67548ab6e0e45a7", "af724806f99f7872"),
    "windowed_join mode: stream": ("74aecdbdb9f38598", "02e94269a4a1c18e"),
    "windowed_join mode: table": ("8fd9ac5156b6ae15", "e40febe91c3213c8"),
    "self_join": ("d55263157f79a867", "af0a8260ce5902f4"),
    "multiway_join": ("ecbb0e8804f92c1a", "bc4eb672a888b6ae"),
}
#: Minimal specs, every optional field at its default, recorded the same way.
MINIMAL = [
    (
        {
            "kind": "foreign_key_join",
            "left": {"path": "/w/orders", "key": ["order_id"]},
            "right": {"path": "/w/customers", "key": ["customer_id"]},
            "foreign_key": ["customer_id"],
            "output": {"path": "/w/out"},
        },
        "5116b6b765f1622f",
    ),
    (
        {
            "kind": "windowed_join",
            "mode": "stream",
            "left": {"path": "/w/a", "key": ["k"], "time": "t"},
            "right": {"path": "/w/b", "key": ["k"], "time": "t"},
            "window": {"before": 0, "after": 0},
            "output": {"path": "/w/out"},
        },
        "0c36e4e858d9473f",
    ),
]


def test_every_spec_field_has_a_description_and_an_example() -> None:
    models = spec_model_classes()
    assert len(models) >= 20
    undescribed = [
        f"{model.__name__}.{name}"
        for model in models.values()
        for name, info in model.model_fields.items()
        if not (info.description and info.description.strip())
    ]
    assert not undescribed, f"fields without Field(description=...): {undescribed}"
    without_example = [
        f"{model.__name__}.{name}"
        for model in models.values()
        for name, info in model.model_fields.items()
        if not info.examples
    ]
    assert not without_example, f"fields without Field(examples=[...]): {without_example}"


def test_descriptions_speak_to_a_dag_author() -> None:
    """No engine vocabulary a spec author never wrote: class names, Python reprs, reST markup."""
    models = spec_model_classes()
    class_names = re.compile(r"\b(" + "|".join(map(re.escape, models)) + r")\b")
    for model in models.values():
        for name, info in model.model_fields.items():
            text = info.description or ""
            where = f"{model.__name__}.{name}"
            assert not class_names.search(text), f"{where} names a class: {text}"
            assert "``" not in text and ":class:" not in text, f"{where} has reST markup: {text}"
            assert not re.search(r"\b(None|True|False)\b", text), f"{where} uses Python literals: {text}"
            assert text.rstrip().endswith((".", ")")), f"{where} is not a sentence: {text}"


def test_the_published_schema_is_the_models_schema() -> None:
    assert SCHEMA_FILE.read_text() == spec_json_schema_text(), f"stale {SCHEMA_FILE.name}: run {REGENERATE}"


def test_the_schema_is_valid_json_schema_and_carries_every_description() -> None:
    schema = spec_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    text = json.dumps(schema)
    assert '"title"' not in text.replace('"title": "airflow-provider-fkjoin spec"', "")
    for model in spec_model_classes().values():
        for info in model.model_fields.values():
            assert json.dumps(info.description)[1:-1] in text


def test_each_fields_examples_are_valid_for_it() -> None:
    """A field's examples, shown in the reference, the schema and error messages, are values it accepts."""
    schema = spec_json_schema()
    definitions = schema["$defs"]
    checked = 0
    for name, definition in definitions.items():
        for field, subschema in definition.get("properties", {}).items():
            validator = jsonschema.Draft202012Validator({"$defs": definitions, **subschema})
            for example in subschema.get("examples", []):
                errors = [error.message for error in validator.iter_errors(example)]
                assert not errors, f"{name}.{field}: example {example!r} is refused: {errors}"
                checked += 1
    assert checked > 60


def _doc_specs() -> list[tuple[str, dict[str, Any]]]:
    """Every native spec in a fenced yaml block of the README and the docs (Joinery's format left out)."""
    found = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        blocks = re.findall(r"^```yaml\n(.*?)^```", page.read_text(), flags=re.S | re.M)
        for index, block in enumerate(blocks):
            try:
                data = yaml.safe_load(block)
            except yaml.YAMLError:
                continue
            if isinstance(data, dict) and "kind" in data and data.get("format") != "joinery":
                found.append((f"{page.relative_to(REPO)}#{index}", data))
    return found


DOC_SPECS = _doc_specs()


@pytest.mark.parametrize(
    "spec",
    [*SAMPLES.values(), *(spec for _, spec in DOC_SPECS)],
    ids=[*SAMPLES, *(where for where, _ in DOC_SPECS)],
)
def test_the_schema_accepts_what_the_engine_accepts(spec: dict[str, Any]) -> None:
    load_spec(spec)
    jsonschema.validate(spec, spec_json_schema())


BASE = SAMPLES["foreign_key_join"]


@pytest.mark.parametrize(
    "spec",
    [
        {**BASE, "how": "lft"},
        {**BASE, "output": 5},
        {**BASE, "colums": {"a": "l.a"}},
        {**BASE, "left": {"path": "/w/orders", "key": "order_id"}},
        {**BASE, "left": {"path": "/w/orders", "key": []}},
        {**BASE, "foreign_key": 5},
        {**BASE, "kind": "hash_join"},
        {k: v for k, v in BASE.items() if k != "kind"},
        {**SAMPLES["windowed_join mode: stream"], "window": {"before": "1 hour", "after": "1h"}},
        {**SAMPLES["windowed_join mode: stream"], "mode": "tabel"},
        {k: v for k, v in SAMPLES["self_join"].items() if k != "columns"},
        {**SAMPLES["self_join"], "how": "left"},
        {**SAMPLES["global_table_bootstrap"], "broadcast_warn_bytes": -1},
        {**SAMPLES["multiway_join"], "inputs": SAMPLES["multiway_join"]["inputs"][:1]},
    ],
    ids=lambda spec: ",".join(sorted(spec))[:40],
)
def test_the_schema_refuses_what_the_engine_refuses(spec: dict[str, Any]) -> None:
    with pytest.raises(Exception, match="invalid spec"):
        load_spec(spec)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(spec, spec_json_schema())


@pytest.mark.parametrize("key", list(SAMPLES))
def test_describing_the_fields_changed_no_fingerprint(key: str) -> None:
    spec = load_spec(SAMPLES[key])
    hashes = json.dumps(spec_field_hashes(spec), sort_keys=True).encode()
    assert (spec_fingerprint(spec), hashlib.sha256(hashes).hexdigest()[:16]) == RECORDED[key]


@pytest.mark.parametrize(("spec", "fingerprint"), MINIMAL)
def test_defaults_keep_their_fingerprint(spec: dict[str, Any], fingerprint: str) -> None:
    assert spec_fingerprint(load_spec(spec)) == fingerprint


@pytest.fixture(scope="module")
def hook() -> ModuleType:
    """The docs' spec-reference hook, loaded as MkDocs loads it."""
    spec = importlib.util.spec_from_file_location(
        "fkjoin_docs_spec_reference_t", REPO / "docs/hooks/spec_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_reference_shows_each_fields_description_and_example(hook: ModuleType) -> None:
    rows = {row.path: row for row in hook.field_rows(hook.spec_models()["foreign_key_join"])}
    assert rows["how"].description.startswith("What happens to a left row whose foreign key matches no")
    assert rows["left.key"].description.endswith("Examples: `['order_id']`, `['tenant_id', 'order_id']`.")
    assert all(row.description for model in hook.spec_models().values() for row in hook.field_rows(model))


def test_the_reference_refuses_a_field_without_description(hook: ModuleType) -> None:
    from mkdocs.exceptions import PluginError

    class Undescribed(BaseModel):
        described: int = Field(default=0, description="A number.")
        bare: int = 0

    with pytest.raises(PluginError, match="field 'bare' of Undescribed has no description"):
        hook.field_rows(Undescribed)


def test_the_docs_build_refuses_a_stale_schema(
    hook: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from mkdocs.exceptions import PluginError

    hook.check_schema_file()
    stale = tmp_path / "spec.schema.json"
    stale.write_text(spec_json_schema_text().replace("primary key", "key"))
    monkeypatch.setattr(hook, "SCHEMA", stale)
    with pytest.raises(PluginError, match="is not the models' schema; run python -m"):
        hook.check_schema_file()


def test_a_table_given_as_its_path_alone_is_valid_for_both() -> None:
    """``output: /w/x`` is accepted by the engine (as the operators accept it) and by the schema."""
    spec = {**BASE, "output": "/w/x"}
    assert load_spec(spec).output.path == "/w/x"
    jsonschema.validate(spec, spec_json_schema())
