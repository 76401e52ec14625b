"""The spec's JSON Schema, generated from the models: editors validate YAML and JSON specs with it and show
each field's description and examples while the spec is written (the docs publish it as
``spec.schema.json``).

It says what the models' types and constraints say, with each field's own description; what only a
validator checks (one of ``path`` or ``name``, a changelog's columns against the key, a window that is not
inverted) is found by ``load_spec``. A spec in Joinery's own format is converted before validation, so the
schema does not describe it.

To write it::

    python -m airflow_provider_fkjoin.engine.core.spec > spec.schema.json
"""

from __future__ import annotations

import json
import typing
from typing import Any

from pydantic import BaseModel, TypeAdapter

from .loading import AnySpec, Spec
from .refs import TableRef

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def spec_model_classes() -> dict[str, type[BaseModel]]:
    """Every model a spec is made of, from the kinds down to their nested objects, by class name (the
    schema's ``$defs`` keys).

    >>> sorted(spec_model_classes())[:3]
    ['ChangelogFormat', 'ChangelogOps', 'EventStreamRef']
    """
    found: dict[str, type[BaseModel]] = {}

    def walk(annotation: Any) -> None:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation.__name__ not in found:
                found[annotation.__name__] = annotation
                for info in annotation.model_fields.values():
                    walk(info.annotation)
            return
        for argument in typing.get_args(annotation):
            walk(argument)

    walk(AnySpec)
    return found


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
    definitions = schema.get("$defs", {})
    for name, model in spec_model_classes().items():
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
        elif issubclass(model, TableRef):
            # a table needing nothing but its location may be given as its path alone (output: /w/x)
            definitions[name] = {"anyOf": [{"type": "string", "description": "the table's path"}, definition]}
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
