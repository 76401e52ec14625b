"""The public API's docstring examples run: every ``>>>`` example of what ``airflow_provider_fkjoin.engine``
exports (``__all__``, the lazy names included) and of the Airflow layer's operator, hook, sensor and
trigger modules runs with :mod:`doctest` and must print what the docstring shows.

An example that needs Spark, a Delta table or a server is marked ``# doctest: +SKIP`` in the docstring,
so the reader sees it is not run; it must still compile. Pure: no Spark session, no JVM.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import os
import tempfile
from pathlib import Path

import pytest

# Airflow reads AIRFLOW_HOME when first imported (the Airflow-layer modules import it): keep it isolated.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="fkjoin-airflow-home-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

REPO = Path(__file__).resolve().parents[1]
ENGINE = "airflow_provider_fkjoin.engine"
#: The Airflow layer's public modules: operators, hooks, the sensor and its trigger.
AIRFLOW_MODULES = (
    "airflow_provider_fkjoin.operators.joins",
    "airflow_provider_fkjoin.hooks.fkjoin",
    "airflow_provider_fkjoin.hooks.connect",
    "airflow_provider_fkjoin.hooks.submit",
    "airflow_provider_fkjoin.hooks.masking",
    "airflow_provider_fkjoin.sensors.high_watermark",
    "airflow_provider_fkjoin.triggers.high_watermark",
)
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def public_doctests() -> list[doctest.DocTest]:
    """The docstring examples of the public API, one DocTest per docstring that has any."""
    finder = doctest.DocTestFinder()
    found: dict[str, doctest.DocTest] = {}
    engine = importlib.import_module(ENGINE)
    for name in engine.__all__:
        obj = getattr(engine, name)
        if not (inspect.isfunction(obj) or inspect.isclass(obj)):
            continue  # a constant: no docstring of its own
        module = inspect.getmodule(obj)
        assert module is not None
        for test in finder.find(obj, f"{module.__name__}.{name}", module=module, globs=vars(module)):
            found[test.name] = test
    for name in AIRFLOW_MODULES:
        for test in finder.find(importlib.import_module(name)):
            found[test.name] = test
    tests = [test for test in found.values() if test.examples]
    return sorted(tests, key=lambda test: (test.filename or "", test.lineno or 0))


def _where(test: doctest.DocTest, example: doctest.Example | None = None) -> str:
    path = Path(test.filename or "?").resolve()
    shown = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    line = (test.lineno or 0) + (example.lineno if example else 0) + 1
    return f"{shown}:{line}"


def _skipped(example: doctest.Example) -> bool:
    return bool(example.options.get(doctest.SKIP))


DOCTESTS = public_doctests()


def test_the_public_api_has_examples_that_run() -> None:
    """The scope cannot shrink to nothing: most examples run, and those skipped are few and marked."""
    examples = [example for test in DOCTESTS for example in test.examples]
    run = [example for example in examples if not _skipped(example)]
    assert len(run) >= 20, f"only {len(run)} of {len(examples)} public docstring examples run"


@pytest.mark.parametrize("test", DOCTESTS, ids=[f"{_where(test)} {test.name}" for test in DOCTESTS])
def test_docstring_examples(test: doctest.DocTest) -> None:
    for example in test.examples:
        if _skipped(example):  # not run, but it must still be Python
            try:
                compile(example.source, _where(test, example), "single")
            except SyntaxError as error:
                pytest.fail(f"{_where(test, example)}: a +SKIP example is not valid Python: {error}")
    if all(_skipped(example) for example in test.examples):
        pytest.skip(f"{_where(test)}: every example is marked +SKIP (needs Spark, a table or a server)")
    report: list[str] = []
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    result = runner.run(test, out=report.append)
    assert result.failed == 0, f"{_where(test)} {test.name}: docstring example failed:\n" + "".join(report)
