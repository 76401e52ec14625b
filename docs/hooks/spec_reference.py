"""MkDocs hook: the spec reference, generated from the engine's pydantic models when the site is built.

``docs/spec-reference.md`` holds the prose and one marker per spec model::

    <!-- spec-fields: foreign_key_join -->
    <!-- spec-fields: windowed_join mode: stream -->

Each marker becomes a table of every field of that model, nested objects flattened into field paths
(``left.changelog.op_column``, ``inputs[].aliases[].from``): the path, the type with its constraints, the
default (or "required") and the field's own ``description`` with its ``examples``: the text the JSON Schema
and the engine's error messages show too.

The build fails (a ``PluginError``) when the models cannot be imported, when a marker names no model, when
a model has no marker, when a field has no description, when ``docs/spec.schema.json`` is not the schema the
models give, or when the page was not rendered at all: the reference is never silently empty or stale.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

try:
    # The one import of the spec models. If the module moves, change this line only.
    from airflow_provider_fkjoin.engine.core.spec import (
        AnySpec,
        field_limits,
        flow_yaml,
        spec_json_schema_text,
    )
except ImportError as error:  # pragma: no cover - exercised by a broken install
    raise PluginError(f"spec reference: cannot import the spec models: {error}") from error

PAGE = "spec-reference.md"
SCHEMA = Path(__file__).resolve().parents[1] / "spec.schema.json"
SCHEMA_COMMAND = "python -m airflow_provider_fkjoin.engine.core.spec > docs/spec.schema.json"
MARKER = re.compile(r"<!--\s*spec-fields:\s*([a-z_]+)(?:\s+mode:\s*([a-z_]+))?\s*-->")
DURATION = "[duration](#durations)"
_rendered: set[str] = set()


@dataclass(frozen=True)
class Row:
    path: str
    type: str
    default: str
    description: str


def spec_models() -> dict[str, type[BaseModel]]:
    """Every spec model by its marker key: the kind, plus ``mode: <mode>`` for a kind with modes."""
    models: dict[str, type[BaseModel]] = {}
    for model in typing.get_args(AnySpec):
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise PluginError(f"spec reference: {model!r} in the spec union is not a pydantic model")
        (kind,) = typing.get_args(model.model_fields["kind"].annotation)
        mode_field = model.model_fields.get("mode")
        key = kind if mode_field is None else f"{kind} mode: {typing.get_args(mode_field.annotation)[0]}"
        models[key] = model
    if not models:
        raise PluginError("spec reference: the spec union holds no models")
    return models


def _description(model: type[BaseModel], name: str, field: Any) -> str:
    """A field's description (Markdown) and its examples in YAML's flow style; a PluginError without one."""
    if not field.description:
        raise PluginError(
            f"spec reference: field {name!r} of {model.__name__} has no description; give it "
            "Field(description=...) in the model"
        )
    examples = [f"`{flow_yaml(example)}`" for example in field.examples or []]
    shown = "Example" if len(examples) == 1 else "Examples"
    return field.description + (f" {shown}: {', '.join(examples)}." if examples else "")


def check_schema_file() -> None:
    """Fail the build when ``docs/spec.schema.json`` is not what the models give (it is published with the
    site, and editors validate specs with it)."""
    if not SCHEMA.is_file() or SCHEMA.read_text() != spec_json_schema_text():
        raise PluginError(f"spec reference: {SCHEMA.name} is not the models' schema; run {SCHEMA_COMMAND}")


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _union_args(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def _type_name(annotation: Any) -> str:
    """A type as a spec author reads it (Markdown)."""
    names = []
    for arg in _union_args(annotation):
        if arg is type(None):
            continue
        origin = typing.get_origin(arg)
        if origin is typing.Literal:
            names.extend(f"`{value}`" for value in typing.get_args(arg))
        elif _is_model(arg):
            names.append("object")
        elif origin is list:
            (item,) = typing.get_args(arg)
            names.append("list of objects" if _is_model(item) else f"`list[{_plain(item)}]`")
        elif origin is dict:
            key, value = typing.get_args(arg)
            names.append(f"`dict[{_plain(key)}, {_plain(value)}]`")
        else:
            names.append(f"`{_plain(arg)}`")
    return " or ".join(names)


def _plain(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def _constraints(field: Any) -> list[str]:
    """What a field's metadata restricts (lengths, bounds) and special parsing (durations)."""
    durations = [
        DURATION
        for item in field.metadata
        if type(item).__name__ == "BeforeValidator" and "duration" in getattr(item.func, "__name__", "")
    ]
    return field_limits(field) + durations


def _default(field: Any) -> str:
    if field.is_required():
        return "**required**"
    if field.default is None and field.validate_default:
        return "**required**"  # a None default its validator refuses: the field must be given
    if field.default_factory is not None:
        value = field.default_factory()
        if isinstance(value, BaseModel):
            return "see below"
    else:
        value = field.default
    if value is PydanticUndefined or value is None:
        return "not set"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, int) and value >= 1024 * 1024 and value % (1024 * 1024) == 0:
        return f"`{value}` ({value // (1024 * 1024)} MiB)"
    if isinstance(value, list | dict) and not value:
        return f"`{'[]' if isinstance(value, list) else '{}'}`"
    return f"`{value}`"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _ordered_fields(model: type[BaseModel], top: bool) -> list[tuple[str, Any]]:
    """A model's fields in declaration order; for a kind's model, ``kind`` and ``mode`` first and the
    fields every kind shares (declared on a base class) last."""
    fields = list(model.model_fields.items())
    if not top:
        return fields
    own = inspect.get_annotations(model)
    first = [item for item in fields if item[0] in ("kind", "mode")]
    rest = [item for item in fields if item[0] not in ("kind", "mode")]
    return first + [item for item in rest if item[0] in own] + [item for item in rest if item[0] not in own]


def field_rows(model: type[BaseModel], prefix: str = "") -> list[Row]:
    """Every field of ``model`` and of the models nested in it, depth first, by field path."""
    if not model.__pydantic_complete__:
        model.model_rebuild()  # resolve forward references, as pydantic does before the first validation
    rows = []
    for name, field in _ordered_fields(model, top=not prefix):
        shown = field.alias or name
        path = f"{prefix}{shown}"
        annotation = field.annotation
        nested = [arg for arg in _union_args(annotation) if _is_model(arg)]
        items = [
            typing.get_args(arg)[0]
            for arg in _union_args(annotation)
            if typing.get_origin(arg) is list and _is_model(typing.get_args(arg)[0])
        ]
        constraints = _constraints(field)
        if DURATION in constraints:
            type_text = ", ".join(constraints)
        else:
            type_text = ", ".join([_type_name(annotation), *constraints])
        rows.append(Row(path, type_text, _default(field), _description(model, name, field)))
        for child in nested:
            rows.extend(field_rows(child, f"{path}."))
        for child in items:
            rows.extend(field_rows(child, f"{path}[]."))
    return rows


def field_table(model: type[BaseModel]) -> str:
    lines = ["| field | type | default | description |", "|---|---|---|---|"]
    for row in field_rows(model):
        lines.append(
            f"| `{row.path}` | {_cell(row.type)} | {_cell(row.default)} | {_cell(row.description)} |"
        )
    lines.append("")
    lines.append(f"*Generated from `{model.__name__}` (`{model.__module__}`).*")
    return "\n".join(lines)


def render(markdown: str) -> str:
    """The page with every marker replaced by its model's table; a PluginError when a marker names no
    model or a model has no marker."""
    models = spec_models()
    used: set[str] = set()

    def replace(found: re.Match[str]) -> str:
        key = found.group(1) if found.group(2) is None else f"{found.group(1)} mode: {found.group(2)}"
        if key not in models:
            raise PluginError(
                f"spec reference: marker {found.group(0)!r} names no spec model; known: {sorted(models)}"
            )
        used.add(key)
        return field_table(models[key])

    page = MARKER.sub(replace, markdown)
    missing = sorted(set(models) - used)
    if missing:
        raise PluginError(f"spec reference: no marker for the spec models {missing} in {PAGE}")
    return page


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if page.file.src_uri != PAGE:
        if MARKER.search(markdown):
            raise PluginError(
                f"spec reference: {page.file.src_uri} has a spec-fields marker; only {PAGE} may"
            )
        return markdown
    _rendered.add(PAGE)
    return render(markdown)


def on_pre_build(config: Any) -> None:
    _rendered.clear()
    check_schema_file()


def on_post_build(config: Any) -> None:
    if PAGE not in _rendered:
        raise PluginError(f"spec reference: {PAGE} was not rendered (is it in docs/ and in the nav?)")
