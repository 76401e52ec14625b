"""The examples in ``README.md`` and ``docs/`` are checked, so a spec or snippet that drifts from the code
fails the build, pointing at the block (``file:line`` of its opening fence, in the test id).

* Every fenced ``yaml`` block is a spec (it has a ``kind``, or is in Joinery's format) and must load with
  the engine's :func:`load_spec`; a block that deliberately shows part of a spec is marked
  ``<!-- fragment: why -->`` on the line before its fence, and must then at least parse as YAML.
* Every fenced ``python`` block runs, without Spark, in an isolated AIRFLOW_HOME: building a DAG and its
  operators checks every import and argument name. A block that needs a Spark session or a server is
  marked ``<!-- not-run: why -->`` on the line before its fence; it must still compile, and its imports
  run.

Nothing is skipped without a marker the reader of the page can see in its source. Pure: no Spark session,
no JVM (a snippet that tries to start one fails).
"""

from __future__ import annotations

import ast
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

# Airflow reads AIRFLOW_HOME when first imported: the DAG snippets must not touch a real installation.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="fkjoin-airflow-home-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<lang>[\w+-]*)")
MARKER = re.compile(r"^\s*<!--\s*(?P<kind>fragment|not-run)\s*(?::\s*(?P<why>.*?))?\s*-->\s*$")
#: Which marker each language may carry.
MARKERS = {"yaml": "fragment", "python": "not-run"}


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page: where its fence opens, its language, text and marker."""

    page: Path
    line: int
    lang: str
    text: str
    marker: str | None = None
    why: str | None = None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def fenced_blocks(page: Path) -> list[Block]:
    """The fenced code blocks of a markdown page, each with the marker on the line before its fence."""
    lines = page.read_text().splitlines()
    blocks = []
    number = 0
    while number < len(lines):
        opening = FENCE.match(lines[number])
        if not opening:
            number += 1
            continue
        indent, fence = opening.group("indent"), opening.group("fence")
        end = number + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        body = [line.removeprefix(indent) for line in lines[number + 1 : end]]
        previous = next((lines[i] for i in range(number - 1, -1, -1) if lines[i].strip()), "")
        marker = MARKER.match(previous)
        blocks.append(
            Block(
                page,
                number + 1,
                opening.group("lang").lower(),
                "\n".join(body) + "\n",
                marker.group("kind") if marker else None,
                marker.group("why") if marker else None,
            )
        )
        number = end + 1
    return blocks


BLOCKS = [block for page in PAGES for block in fenced_blocks(page)]
YAML_BLOCKS = [block for block in BLOCKS if block.lang in ("yaml", "yml")]
PYTHON_BLOCKS = [block for block in BLOCKS if block.lang in ("python", "py")]


def _ids(blocks: list[Block]) -> list[str]:
    return [block.where for block in blocks]


def test_examples_are_found() -> None:
    """The parser sees the pages' examples, so a broken parser cannot pass by checking nothing; every
    join kind's page shows a spec that loads."""
    specs = [block for block in YAML_BLOCKS if block.marker is None]
    run = [block for block in PYTHON_BLOCKS if block.marker is None]
    assert specs, "no yaml spec block found in README.md or docs/"
    assert run, "no python block that runs found in README.md or docs/"
    without_spec = [
        page.relative_to(REPO).as_posix()
        for page in sorted((REPO / "docs" / "kinds").glob("*.md"))
        if not any(block.page == page for block in specs)
    ]
    assert not without_spec, f"join kind pages without a spec block: {without_spec}"


@pytest.mark.parametrize("block", BLOCKS, ids=_ids(BLOCKS))
def test_markers_are_where_they_apply(block: Block) -> None:
    if block.marker is None:
        return
    assert MARKERS.get(block.lang) == block.marker, (
        f"{block.where}: <!-- {block.marker} --> marks a {block.lang or 'plain'} block; it applies to "
        + ", ".join(f"{lang} ({marker})" for lang, marker in MARKERS.items())
    )
    assert block.why, f"{block.where}: say why: <!-- {block.marker}: reason -->"


@pytest.mark.parametrize("block", YAML_BLOCKS, ids=_ids(YAML_BLOCKS))
def test_yaml_spec_loads(block: Block, tmp_path: Path) -> None:
    from airflow_provider_fkjoin.engine import SpecError, load_spec
    from airflow_provider_fkjoin.engine.core.joinery import is_joinery

    try:
        data = yaml.safe_load(block.text)
    except yaml.YAMLError as error:
        pytest.fail(f"{block.where}: the yaml block does not parse: {error}")
    is_spec = isinstance(data, dict) and ("kind" in data or is_joinery(data))
    if block.marker == "fragment":
        assert not is_spec, f"{block.where}: a whole spec is marked as a fragment; drop the marker"
        return
    assert is_spec, (
        f"{block.where}: a yaml block without a kind is not a spec; if it shows part of one, mark it "
        "<!-- fragment: what it shows --> on the line before its fence"
    )
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(block.text)
    try:
        load_spec(spec_file)
    except SpecError as error:
        pytest.fail(f"{block.where}: the spec does not load:\n{error}")


@pytest.fixture
def no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to build a Spark session (classic or Connect) fails the test instead of starting one."""
    from pyspark.sql import SparkSession

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("this snippet starts Spark: mark it <!-- not-run: needs Spark -->")

    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", refuse)


def _imports_only(tree: ast.Module) -> ast.Module:
    """The module's top-level imports, for a snippet that cannot run whole."""
    body: list[ast.stmt] = [node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)]
    return ast.Module(body=body, type_ignores=[])


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=_ids(PYTHON_BLOCKS))
@pytest.mark.usefixtures("no_spark")
def test_python_snippet_runs(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        tree = ast.parse(block.text, block.where)
    except SyntaxError as error:
        pytest.fail(f"{block.where}: the python block is not valid Python: {error}")
    monkeypatch.chdir(tmp_path)  # relative paths a snippet names resolve in a scratch folder
    namespace = {"__name__": "doc_example"}
    run, what = (_imports_only(tree), "its imports") if block.marker == "not-run" else (tree, "it")
    try:
        exec(compile(run, block.where, "exec"), namespace)
    except Exception as error:
        pytest.fail(f"{block.where}: the python block fails when {what} run: {type(error).__name__}: {error}")
