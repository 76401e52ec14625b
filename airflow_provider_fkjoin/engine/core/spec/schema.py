"""The spec's JSON Schema, generated from the models: editors validate YAML and JSON specs with it and show
each field's description and examples while the spec is written (the docs publish it as
``spec.schema.json``).

It says what the models' types and constraints say, with each field's own description; what only a
validator checks (one of ``path`` or ``name``, a changelog's columns against the key, a window that is not
inverted) is found by ``load_spec``. A spec in Joinery's own format is converted before validation, so the
schema does not describe it.

Run as a script to write it::

    python -m airflow_provider_fkjoin.engine.core.spec.schema > spec.schema.json
"""

from __future__ import annotations

import json
import typing
from typing import Any

from pydantic import BaseModel, TypeAdapter

from .loading import AnySpec, Spec

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _models(annotation: Any, found: dict[str, type[BaseModel]]) -> None:
    """Every model reachable from ``annotation``, by name (the schema's ``$defs`` keys)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation.__name__ in found:
            return
        found[annotation.__name__] = annotation
        for info in annotation.model_fields.values():
            _models(info.annotation, found)
        return
    for argument in typing.get_args(annotation):
        _models(argument, found)


def _plain(node: Any, *, names: bool = False) -> Any:
    """The schema without pydantic's titles (class names, and field names spelled as titles: an editor
    shows the field's description instead) and without OpenAPI's ``discriminator``, which JSON Schema does
    not have (``oneOf`` over the kinds' ``const`` values says the same)."""
    if isinstance(node, dict):
        return {
            key: _plain(value, names=key in ("properties", "$defs"))
            for key, value in node.items()
            if names or key not in ("title", "discriminator")
        }
    if isinstance(node, list):
        return [_plain(item) for item in node]
    return node


def spec_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a spec: one of the kinds, by ``kind`` (and ``mode``).

    >>> schema = spec_json_schema()
    >>> schema["$defs"]["ForeignKeyJoinSpec"]["properties"]["how"]["enum"]
    ['inner', 'left']
    """
    schema = TypeAdapter(Spec).json_schema(by_alias=True, mode="validation")
    models: dict[str, type[BaseModel]] = {}
    for model in typing.get_args(AnySpec):
        _models(model, models)
    definitions = schema.get("$defs", {})
    for name, model in models.items():
        definition = definitions.get(name)
        if definition is None:
            continue
        definition.pop("description", None)  # the class's docstring, written for the engine's developers
        required = list(definition.get("required", []))
        for field_name, info in model.model_fields.items():
            shown = info.alias or field_name
            # A None default that the field's validator refuses: the field must be given.
            if info.default is None and info.validate_default and shown not in required:
                required.append(shown)
        if required:
            definition["required"] = required
    return {
        "$schema": SCHEMA_DIALECT,
        "title": "airflow-provider-fkjoin spec",
        "description": (
            "A join spec for airflow-provider-fkjoin: a mapping with a kind (foreign_key_join, "
            "global_table_bootstrap, stream_table_join, windowed_join, self_join or multiway_join) and "
            "that kind's fields."
        ),
        **_plain(schema),
    }


def spec_json_schema_text() -> str:
    """The schema as the file the docs publish: indented JSON with a final newline."""
    return json.dumps(spec_json_schema(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":  # pragma: no cover - a command for writing the file
    print(spec_json_schema_text(), end="")
