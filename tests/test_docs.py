"""The documentation: the MkDocs site builds with warnings as errors (a broken link or anchor, a page missing
from the navigation, a navigation entry without a page, a spec reference that cannot be generated all fail
it), the README stays short, and no file in the repository speaks of development sessions or issue numbers
or points at documents outside the repository.

One site build per test session (``site`` fixture); nothing here starts Spark.
"""

from __future__ import annotations

import html
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
HOOK = DOCS / "hooks" / "spec_reference.py"
README_MAX_LINES = 200
DEVELOPMENT_HISTORY = re.compile(r"\b[Ss]ession [0-9]+\b|\b[Ii]ssue #?[0-9]+\b|\bstop [0-9]+\b")
OUTSIDE_DOCUMENTS = re.compile(
    r"\bDESIGN\.md\b|kafka_join_semantics\.md|windowed_self_multiway\.md|\.\./shared/"
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built once with ``mkdocs build --strict`` into a temporary folder."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert build.returncode == 0, f"mkdocs build --strict failed:\n{build.stdout}\n{build.stderr}"
    return out


@pytest.fixture(scope="module")
def hook() -> ModuleType:
    """The spec-reference hook, loaded as MkDocs loads it."""
    spec = importlib.util.spec_from_file_location("fkjoin_docs_spec_reference", HOOK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_docs_build_strict(site: Path) -> None:
    assert (site / "index.html").is_file()
    assert not (site / "hooks").exists(), "the build hook must not be published with the site"


def test_spec_reference_lists_every_field_of_every_kind(site: Path, hook: ModuleType) -> None:
    page = (site / "spec-reference" / "index.html").read_text()
    models = hook.spec_models()
    assert len(models) >= 7
    for key, model in models.items():
        assert f"<code>{model.__name__}</code>" in page, f"no table generated for {key}"
        missing = [
            row.path for row in hook.field_rows(model) if f"<code>{html.escape(row.path)}</code>" not in page
        ]
        assert not missing, f"{key}: fields missing from the spec reference: {missing}"


def test_spec_reference_hook_fails_rather_than_rendering_nothing(hook: ModuleType) -> None:
    from mkdocs.exceptions import PluginError

    every = "\n".join(f"<!-- spec-fields: {key} -->" for key in hook.spec_models())
    assert "Generated from" in hook.render(every)
    with pytest.raises(PluginError, match="no marker"):
        hook.render("# Spec reference\n\nno markers at all\n")
    with pytest.raises(PluginError, match="names no spec model"):
        hook.render(every + "\n<!-- spec-fields: no_such_kind -->")


def test_readme_is_short() -> None:
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; keep it to {README_MAX_LINES}"


def _nav_pages(entry: Any) -> list[str]:
    if isinstance(entry, str):
        return [entry]
    if isinstance(entry, list):
        return [page for item in entry for page in _nav_pages(item)]
    if isinstance(entry, dict):
        return [page for value in entry.values() for page in _nav_pages(value)]
    return []


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page() -> None:
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text())
    nav = [page for page in _nav_pages(config["nav"]) if not re.match(r"^[a-z]+://", page)]
    assert len(nav) == len(set(nav)), (
        f"pages listed twice in the nav: {sorted(p for p in nav if nav.count(p) > 1)}"
    )
    missing = sorted(page for page in nav if not (DOCS / page).is_file())
    assert not missing, f"mkdocs.yml's nav lists pages that do not exist: {missing}"
    pages = {path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md")}
    pages = {page for page in pages if not page.startswith("hooks/")}  # excluded from the site
    left_out = sorted(pages - set(nav))
    assert not left_out, f"pages in docs/ missing from mkdocs.yml's nav: {left_out}"


def _tracked_text_files() -> list[tuple[str, str]]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True, timeout=60
    ).stdout.decode()
    files = []
    for name in filter(None, listed.split("\0")):
        path = REPO / name
        try:
            files.append((name, path.read_text(encoding="utf-8")))
        except (FileNotFoundError, IsADirectoryError, UnicodeDecodeError):
            continue  # deleted in the working tree, or not text
    return files


def _offenders(pattern: re.Pattern[str]) -> list[str]:
    found = []
    for name, text in _tracked_text_files():
        for number, line in enumerate(text.splitlines(), start=1):
            match = pattern.search(line)
            if match:
                found.append(f"{name}:{number}: {match.group(0)}")
    return found


def test_no_file_names_a_development_session_or_issue() -> None:
    found = _offenders(DEVELOPMENT_HISTORY)
    assert not found, "files that speak of development sessions or issue numbers:\n" + "\n".join(found)


def test_no_file_points_at_documents_outside_the_repository() -> None:
    """The semantics code comments cite live in docs/, so no reference leads out of the repository."""
    found = _offenders(OUTSIDE_DOCUMENTS)
    assert not found, "references to documents outside the repository (cite docs/ instead):\n" + "\n".join(
        found
    )
