"""Provider packaging: the entry point, Airflow's own provider-info schema, importable modules."""

from __future__ import annotations

import importlib
import json
from importlib.metadata import distribution, entry_points
from pathlib import Path

import airflow
import jsonschema

from airflow_provider_fkjoin import get_provider_info


def test_provider_info_is_valid_against_airflows_schema():
    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(get_provider_info(), schema)


def test_package_name_matches_the_installed_distribution():
    info = get_provider_info()
    assert info["package-name"] == "airflow-provider-fkjoin"
    assert distribution(info["package-name"]).metadata["Name"] == "airflow-provider-fkjoin"
    assert info["versions"][0] == distribution("airflow-provider-fkjoin").version


def test_entry_point_returns_the_provider_info():
    (entry,) = [
        e for e in entry_points(group="apache_airflow_provider") if e.dist.name == "airflow-provider-fkjoin"
    ]
    assert entry.load()() == get_provider_info()


def test_every_listed_module_and_link_imports():
    info = get_provider_info()
    integrations = {i["integration-name"] for i in info["integrations"]}
    for section in ("operators", "sensors", "triggers", "hooks"):
        for item in info[section]:
            assert item["integration-name"] in integrations
            for module in item["python-modules"]:
                importlib.import_module(module)
    for path in info["extra-links"]:
        module, _, name = path.rpartition(".")
        assert getattr(importlib.import_module(module), name)().name
