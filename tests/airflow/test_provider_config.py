"""The provider's ``[fkjoin]`` options: every one the code reads is declared in its provider info,
with the type its getter reads and the default its fallback uses, and Airflow serves the declared defaults.

The reads are found in the source (an AST walk of the package: ``conf.get*("fkjoin", "<option>", ...)``),
not from a list kept beside the declaration.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from airflow.configuration import conf

from airflow_provider_fkjoin import get_provider_info

PACKAGE = Path(__file__).resolve().parents[2] / "airflow_provider_fkjoin"
SECTION = "fkjoin"
#: Airflow's config getters and the option type each reads.
GETTER_TYPES = {
    "get": "string",
    "get_mandatory_value": "string",
    "getboolean": "boolean",
    "getint": "integer",
    "getfloat": "float",
    "getlist": "string",
    "getjson": "string",
    "has_option": None,
}


def option_reads(source: str, filename: str = "<source>") -> list[dict[str, Any]]:
    """Each ``<x>.<getter>("fkjoin", "<option>", ...)`` call in ``source``: option, getter, fallback."""
    reads = []
    for node in ast.walk(ast.parse(source, filename)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in GETTER_TYPES or len(node.args) < 2:
            continue
        section, option = node.args[:2]
        if not (isinstance(section, ast.Constant) and section.value == SECTION):
            continue
        assert isinstance(option, ast.Constant) and isinstance(option.value, str), (
            f"{filename}:{node.lineno}: read the [{SECTION}] option by a literal name, so it can be checked"
        )
        fallback = next((k.value for k in node.keywords if k.arg == "fallback"), None)
        reads.append(
            {
                "option": option.value,
                "getter": node.func.attr,
                "fallback": ast.literal_eval(fallback) if fallback is not None else None,
                "where": f"{filename}:{node.lineno}",
            }
        )
    return reads


def package_reads() -> list[dict[str, Any]]:
    return [
        read
        for path in sorted(PACKAGE.rglob("*.py"))
        for read in option_reads(path.read_text(), str(path.relative_to(PACKAGE.parent)))
    ]


def declared() -> dict[str, Any]:
    return get_provider_info()["config"][SECTION]["options"]


def test_the_scan_finds_reads_however_they_are_written():
    source = """
from airflow.configuration import conf as airflow_conf
a = airflow_conf.getboolean("fkjoin", "one", fallback=True)
b = conf.getfloat(
    "fkjoin",
    "two",
)
c = conf.get("core", "dags_folder")
"""
    assert [(r["option"], r["getter"], r["fallback"]) for r in option_reads(source)] == [
        ("one", "getboolean", True),
        ("two", "getfloat", None),
    ]


def test_every_option_the_code_reads_is_declared_with_its_type():
    reads = package_reads()
    assert reads, "no [fkjoin] option read found: the scan is broken"
    options = declared()
    missing = sorted({f"{r['option']} ({r['where']})" for r in reads if r["option"] not in options})
    assert not missing, f"[fkjoin] options read but not declared in provider_info.CONFIG: {missing}"
    for read in reads:
        wanted = GETTER_TYPES[read["getter"]]
        if wanted is not None:
            assert options[read["option"]]["type"] == wanted, read


def test_each_fallback_in_the_code_is_the_declared_default():
    options = declared()
    for read in package_reads():
        if read["fallback"] is None:
            continue
        default = options[read["option"]]["default"]
        kind = options[read["option"]]["type"]
        value = {"boolean": lambda v: v.lower() == "true", "float": float, "integer": int}.get(kind, str)(
            default
        )
        assert value == read["fallback"], (
            f"{read['where']}: fallback {read['fallback']!r}, declared {default!r}"
        )


def test_every_declared_option_is_read_and_described():
    read = {r["option"] for r in package_reads()}
    for name, option in declared().items():
        assert name in read, f"[fkjoin] {name} is declared but nothing reads it"
        assert len(option["description"]) > 40, f"[fkjoin] {name}: describe what it changes"


@pytest.mark.parametrize("name", sorted(declared()))
def test_airflow_serves_the_declared_default(name, monkeypatch):
    monkeypatch.delenv(f"AIRFLOW__FKJOIN__{name.upper()}", raising=False)
    assert conf.get(SECTION, name) == declared()[name]["default"]
