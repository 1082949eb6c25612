"""Smoke tests for the benchmark harness's pure parts: statistics, verdicts, table, README block.

The benchmarks themselves are not tests (they time things); only the code that turns
numbers into the published table is checked here.
"""

from __future__ import annotations

import json
import math

import pytest

from benchmarks import table
from benchmarks.__main__ import select
from benchmarks.render_readme import END, START, RenderError, render, replace_block
from benchmarks.rendezvous_scale import growth_exponent
from benchmarks.stats import Row, Summary, Target, error_row, ratio, summarize

pytestmark = pytest.mark.timeout(30)


def test_summarize_median_min_max() -> None:
    s = summarize([3.0, 1.0, 2.0, 10.0])
    assert (s.median, s.min, s.max, s.n) == (2.5, 1.0, 10.0, 4)
    with pytest.raises(ValueError):
        summarize([])


def test_ratio_of_medians_and_missing_sides() -> None:
    assert ratio(summarize([1.0]), summarize([4.0])) == 0.25
    assert ratio(None, summarize([4.0])) is None
    assert ratio(summarize([1.0]), summarize([0.0])) is None


def test_targets_on_value_and_ratio() -> None:
    ours, theirs = summarize([0.4]), summarize([2.0])
    assert Target("max", 0.5, strict=True).check(ours, ratio(ours, theirs)) is True
    assert Target("max", 0.4, strict=True).check(ours, None) is False
    assert Target("max", 0.4).check(ours, None) is True
    assert Target("ratio_max", 0.3).check(ours, 0.2) is True
    assert Target("ratio_max", 0.3).check(ours, None) is None
    assert Target("min", 300).check(summarize([250.0]), None) is False
    assert Target("max", 0.5, strict=True).text("s") == "< 0.5 s"
    assert Target("ratio_max", 1.05).text("s") == "<= 1.05x"
    assert Target("min", 300).text("MB/s") == ">= 300 MB/s"


def test_row_verdicts() -> None:
    both = [Target("max", 0.5, strict=True), Target("ratio_max", 0.3)]
    assert Row(2, "r", "s", summarize([0.2]), summarize([1.0]), both).passed is True
    assert Row(2, "r", "s", summarize([0.2]), summarize([0.5]), both).passed is False
    assert Row(2, "r", "s", summarize([0.2]), None, both).passed is None
    assert Row(2, "r", "s", summarize([0.2])).passed is None
    assert error_row(1, "launch", "boom", [Target("ratio_max", 1.05)]).passed is False


def test_row_json_and_cells_show_misses() -> None:
    row = Row(
        1, "launch", "s", summarize([1.2, 1.1, 1.3]), summarize([1.0, 1.0, 1.0]), [Target("ratio_max", 1.05)]
    )
    doc = row.to_json()
    assert doc["pass"] is False and doc["ratio"] == 1.2 and doc["target"] == "<= 1.05x"
    cells = table.cells(doc)
    assert cells[2] == "1.200 s (1.100–1.300, n=3)"
    assert cells[3] == "1.000 s (1.000–1.000, n=3)"
    assert cells[4] == "1.20x" and cells[-1] == "MISS"
    broken = table.cells(error_row(6, "cpu", "launcher exited 2", [Target("max", 1.0)]).to_json())
    assert broken[2] == "—" and broken[-1] == "MISS (not measured: launcher exited 2)"
    one = table.cells(Row(4, "health", "s", summarize([0.2]), None, [Target("max", 0.25)]).to_json())
    assert one[2] == "0.200 s" and one[3] == "—" and one[-1] == "pass"


def _doc() -> dict:
    rows = [
        Row(1, "launch", "s", summarize([1.2]), summarize([1.0]), [Target("ratio_max", 1.05)]),
        Row(4, "a|b", "s", Summary(0.2, 0.1, 0.3, 3), None, [Target("max", 0.25)]),
    ]
    return {
        "date": "2026-12-02 17:00 UTC",
        "quick": False,
        "command": "python -m benchmarks",
        "machine": {
            "cpu": "AMD EPYC",
            "cores": 2,
            "memory_gib": 23.5,
            "os": "Linux",
            "python": "3.11.2",
            "torch": "2.13.0",
        },
        "rows": [r.to_json() for r in rows],
        "notes": ["simulated"],
    }


def test_markdown_block_has_machine_date_command_and_bold_misses() -> None:
    md = table.markdown(_doc())
    assert "2026-12-02 17:00 UTC" in md and "AMD EPYC, 2 cores" in md and "torch 2.13.0" in md
    assert "`python -m benchmarks`" in md
    assert "| 1 | launch | 1.200 s | 1.000 s | 1.20x | — | <= 1.05x | **MISS** |" in md
    assert "a\\|b" in md
    assert md.rstrip().endswith("- simulated")


def test_reference_is_measured_beside_the_figure_and_judged_as_a_ratio() -> None:
    # The log goal: at least 1500 MB/s and at least half of writing the file directly.
    targets = [Target("min", 1500.0), Target("ref_ratio_min", 0.5)]
    slow = Row(3, "log", "MB/s", summarize([1600.0]), None, targets, reference=summarize([3400.0]))
    fast = Row(3, "log", "MB/s", summarize([1800.0]), None, targets, reference=summarize([3400.0]))
    unmeasured = Row(3, "log", "MB/s", summarize([1800.0]), None, targets)
    assert (slow.passed, fast.passed, unmeasured.passed) == (False, True, None)
    doc = Row(
        4,
        "health",
        "s",
        summarize([0.05]),
        None,
        [Target("max", 0.06)],
        reference=summarize([0.02, 0.025, 0.03]),
        reference_label="python -c pass",
    ).to_json()
    assert doc["reference_label"] == "python -c pass" and doc["ref_ratio"] == 2.0
    cells = table.cells(doc)
    assert cells[5] == "python -c pass: 0.025 s (0.020–0.030, n=3); ours 2.00x"
    assert (cells[6], cells[-1]) == ("<= 0.06 s", "pass")
    assert Target("ref_ratio_min", 0.5).text("MB/s") == ">= 0.5x reference"
    zero = Row(6, "cpu", "%", summarize([0.04]), None, [], reference_label="0 (idle)").to_json()
    assert table.cells(zero)[5] == "0 (idle)"


def test_replace_block_between_markers() -> None:
    text = f"# Title\n\n{START}\nold\n{END}\ntail\n"
    assert replace_block(text, "new\n") == f"# Title\n\n{START}\nnew\n{END}\ntail\n"


@pytest.mark.parametrize(
    "text",
    ["no markers at all\n", f"{START}\nonly start\n", f"{END}\n{START}\n", f"{START}\n{START}\n{END}\n"],
)
def test_replace_block_refuses_without_one_pair_of_markers(text: str) -> None:
    with pytest.raises(RenderError, match=r"README\.md"):
        replace_block(text, "x")


def test_render_reports_missing_results_and_readme(tmp_path) -> None:
    with pytest.raises(RenderError, match="run `python -m benchmarks` first"):
        render(tmp_path / "none.json", tmp_path / "README.md")
    results = tmp_path / "r.json"
    results.write_text(json.dumps(_doc()))
    with pytest.raises(RenderError, match="not found"):
        render(results, tmp_path / "README.md")
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{START}\n{END}\n")
    render(results, readme)
    assert "| 4 | a\\|b |" in readme.read_text()


def test_growth_exponent_is_the_log_log_slope() -> None:
    linear = [(n, 0.001 * n) for n in (8, 32, 128, 256)]
    assert math.isclose(growth_exponent(linear), 1.0)
    quadratic = [(n, 1e-5 * n * n) for n in (8, 32, 128)]
    assert math.isclose(growth_exponent(quadratic), 2.0)


def test_select_figures_by_name_or_number() -> None:
    assert select(None)[0] == "launch"
    assert select("2,health,2") == ["restart", "health"]
    with pytest.raises(SystemExit):
        select("bogus")
