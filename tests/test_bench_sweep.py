"""``bench.sweep`` end to end on three small cells, in this process, on the test session's SparkSession:
every refresh of every strategy leaves an output equal to its join recomputed from scratch (the engine's
audit), and the report and the heatmap are written. Timings are the benchmark's business: nothing here
asserts one.

The three cells are in the slow tier (``@pytest.mark.slow``), one round each: 18 refreshes (each
strategy's first and one incremental), as many audits and 9 change batches."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
#: FK 1K at 1% and 50%, the global table 1K at 10%: both plans exist for these kinds, and 50% takes
#: datagen's batches past their disjoint keys (``reuse_keys``).
CELLS = [
    ("foreign_key_join", 1_000, 0.01),
    ("foreign_key_join", 1_000, 0.5),
    ("global_table_bootstrap", 1_000, 0.1),
]
ROUNDS = 1
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def sweep(monkeypatch: pytest.MonkeyPatch):
    """``bench.sweep``, imported from the repository's root as ``python -m bench.sweep`` finds it."""
    monkeypatch.syspath_prepend(str(REPO_ROOT))
    import bench.sweep

    return bench.sweep


@pytest.mark.slow
def test_three_cells_each_verified_and_the_report_and_heatmap_written(spark, sweep, tmp_path: Path) -> None:
    json_out, png_out = tmp_path / "sweep.json", tmp_path / "sweep.png"
    report = sweep.run(spark, CELLS, ROUNDS, tmp_path / "work", json_out, png_out, warmup=False)

    assert [(c["kind"], c["size"], c["ratio"]) for c in report["cells"]] == CELLS
    for cell in report["cells"]:
        assert cell["errors"] == [], cell["label"]
        assert cell["verified"], cell["label"]
        assert {strategy: record.get("consistent") for strategy, record in cell["first"].items()} == {
            "incremental": True,
            "recompute": True,
            "auto": True,
        }, cell["label"]
        for strategy, rounds in cell["rounds"].items():
            assert len(rounds) == ROUNDS, (cell["label"], strategy)
            assert all(r["consistent"] is True for r in rounds), (cell["label"], strategy, rounds)
            assert all(r["mode"] == "incremental" for r in rounds), (cell["label"], strategy, rounds)
        # both kinds have both plans: each forced one ran as asked, auto said which it took each round
        assert cell["recompute"] == "available"
        assert all(r["chosen"] == "incremental" for r in cell["rounds"]["incremental"])
        assert all(r["chosen"] == "recompute" for r in cell["rounds"]["recompute"])
        assert len(cell["auto_chose"]) == ROUNDS
        assert set(cell["auto_chose"]) <= {"incremental", "recompute"}
        assert cell["auto_over_best"] is not None and cell["auto_over_best"] > 0
    assert report["summary"]["cells"] == 3 and report["summary"]["verified"] == 3

    written = json.loads(json_out.read_text())
    assert written["summary"] == report["summary"]
    assert [c["label"] for c in written["cells"]] == [c["label"] for c in report["cells"]]
    image = png_out.read_bytes()
    assert image.startswith(PNG_MAGIC)
    assert len(image) > 10_000


def test_sizes_ratios_and_the_quick_cells_parse(sweep) -> None:
    args = sweep.parse_args(["--sizes", "1K,100K", "--ratios", "0.01%,50%", "--kinds", "fk,multiway"])
    assert (args.sizes, args.ratios, args.kinds) == (
        [1_000, 100_000],
        [0.0001, 0.5],
        ["foreign_key_join", "multiway_join"],
    )
    assert len(sweep.planned_cells(args)) == 8
    quick = sweep.parse_args(["--quick", "--json-out", "-"])
    assert sweep.planned_cells(quick) == CELLS
    assert quick.json_out is None and quick.png_out is not None
