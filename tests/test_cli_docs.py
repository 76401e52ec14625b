"""Every ``fkjoin ...`` command line the documentation shows is one the CLI accepts.

The lines are found in ``README.md``, every page under ``docs/`` and the CLI's own ``--help`` examples: in
code blocks (a line starting with ``fkjoin``, ``.venv/bin/fkjoin`` or ``$ fkjoin``, continued by a trailing
backslash) and in inline code spans (``fkjoin status spec.yaml``, which may wrap over two lines). Each is
parsed by the CLI's own parser; those that answer without Spark (``validate``, ``status`` of a spec with
paths, ``--help``, ``--version``) are also run, in an empty folder, and must end with a named result or
error, never a usage error or a traceback.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from airflow_provider_fkjoin import cli

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
_COMMAND = re.compile(r"^\s*(?:\$\s+)?(?:\S*/)?fkjoin(?=\s|$)(.*)$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE = re.compile(r"(?<!`)`((?:\S*/)?fkjoin\s[^`]*)`(?!`)")
#: Commands run for real in the test: they answer from Delta logs or from argparse, without Spark.
QUICK = {"validate", "status"}


def command_of(argv: list[str]) -> str | None:
    """The subcommand a line runs, or None for a prose mention of an option alone (`fkjoin -v`)."""
    return next((token for token in argv if token in cli._EPILOGS), None)


def runs_quickly(argv: list[str]) -> bool:
    return command_of(argv) in QUICK and "--spark" not in argv


def _argv(text: str) -> list[str]:
    return shlex.split(text, comments=True)


def lines_in(markdown: str) -> list[tuple[int, list[str]]]:
    """The ``fkjoin`` command lines of one page: (line number, argv after ``fkjoin``).

    >>> page = "Run `fkjoin status\\n  s.yaml`, or:\\n```bash\\n.venv/bin/fkjoin run s.yaml  # once\\n```"
    >>> lines_in(page)
    [(4, ['run', 's.yaml']), (1, ['status', 's.yaml'])]
    """
    found: list[tuple[int, list[str]]] = []
    in_code, pending, start = False, "", 0
    prose: list[str] = []
    for number, line in enumerate(markdown.splitlines(), start=1):
        if _FENCE.match(line):
            in_code = not in_code
            prose.append("")
            continue
        if not in_code:
            prose.append(line)
            continue
        prose.append("")
        if pending:
            pending += " " + line.strip()
        else:
            match = _COMMAND.match(line)
            if not match:
                continue
            pending, start = match.group(1).strip(), number
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        found.append((start, _argv(pending)))
        pending = ""
    text = "\n".join(prose)
    for match in _INLINE.finditer(text):
        number = text.count("\n", 0, match.start()) + 1
        found.append((number, _argv(match.group(1).split(None, 1)[1] if " " in match.group(1) else "")))
    return found


def documented_lines() -> list[tuple[str, list[str]]]:
    lines = [
        (f"{page.relative_to(REPO)}:{number}", argv)
        for page in PAGES
        for number, argv in lines_in(page.read_text())
    ]
    for name, epilog in cli._EPILOGS.items():
        for number, line in enumerate(epilog.splitlines(), start=1):
            match = _COMMAND.match(line)
            if match and line.startswith("  "):
                lines.append((f"fkjoin {name} --help, line {number}", _argv(match.group(1))))
    return lines


DOCUMENTED = documented_lines()


def test_the_docs_show_the_commands_users_need():
    shown = {command_of(argv) for _, argv in DOCUMENTED}
    assert {"validate", "run", "status", "audit", "connect-server", "jvm-archive", "demo"} <= shown, shown
    assert len(DOCUMENTED) >= 30


@pytest.mark.parametrize(("where", "argv"), DOCUMENTED, ids=[where for where, _ in DOCUMENTED])
def test_a_documented_command_line_parses(where, argv, capsys):
    if command_of(argv) is None:
        return  # a prose mention of an option alone: `fkjoin -v` logs the phases
    try:
        cli.parse_args(argv)
    except SystemExit as exit_info:
        err = capsys.readouterr().err
        assert exit_info.code == 0, f"{where}: `fkjoin {shlex.join(argv)}` is rejected:\n{err}"


@pytest.mark.parametrize(
    ("where", "argv"),
    [(where, argv) for where, argv in DOCUMENTED if runs_quickly(argv)],
    ids=[where for where, argv in DOCUMENTED if runs_quickly(argv)],
)
def test_a_documented_quick_command_runs_to_a_named_answer(where, argv, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def refuse(args: object) -> object:
        raise AssertionError("started a Spark session")

    monkeypatch.setattr(cli, "_spark", refuse)
    code = cli.main(argv)
    _, err = capsys.readouterr()
    assert code in (0, cli.EXIT_BAD_INPUT), f"{where}: exit {code}\n{err}"
    assert "Traceback" not in err and "usage:" not in err, err
    first = err.splitlines()[0] if err else ""
    assert code == 0 or first.startswith(("error: SpecError: ", "problem: ")), f"{where}: {err}"
