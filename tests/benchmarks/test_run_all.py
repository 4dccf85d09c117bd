"""run_all's summary: the README's results table and docs/benchmarks.md, written from result files.

No benchmark runs here: each test writes small result files of its own (or reads the committed
ones) and lets the real summary code turn them into pages in a temporary folder.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from benchmarks import common, run_all

README = "# project\n\nabove\n\n<!-- results:start -->\nstale table\n<!-- results:end -->\n\nbelow\n"


def _result(folder, name, **fields):
    row = common.goal_row(name, f"{name} figure", 1.0, ">= 1", True, "1.0x")
    (folder / f"{name}.json").write_text(json.dumps({"benchmark": name, "summary": [row], **fields}))


@pytest.fixture
def pages(tmp_path, monkeypatch):
    """A results folder, a README and a page path, all temporary, in place of the repository's."""
    results = tmp_path / "results"
    results.mkdir()
    monkeypatch.setattr(common, "RESULTS", results)
    monkeypatch.setattr(run_all, "README", tmp_path / "README.md")
    monkeypatch.setattr(run_all, "PAGE", tmp_path / "benchmarks.md")
    run_all.README.write_text(README)
    return results


def test_the_readme_table_is_replaced_and_the_rest_kept(pages):
    _result(pages, "compile", commit="abc1234", finished="2026-01-02 03:04:05", notes="ran twice")
    run_all.write_summary(quick=False, outcomes={})
    readme = run_all.README.read_text()
    assert readme.startswith("# project\n\nabove\n\n<!-- results:start -->\n") and readme.endswith("\n\nbelow\n")
    assert "stale table" not in readme
    row = next(line for line in readme.splitlines() if line.startswith("| compile"))
    assert [cell.strip() for cell in row.strip("| ").split("|")] == [
        "compile",
        "compile figure",
        "1.0x",
        ">= 1",
        "yes",
        "abc1234",
    ]
    assert any(line.startswith("| step") and "(not run)" in line for line in readme.splitlines())
    page = run_all.PAGE.read_text()
    assert "| `" in page and "abc1234" in page and "2026-01-02" in page
    assert "- `compile.json`: ran twice" in page


def test_the_hand_written_notes_survive_and_regeneration_is_stable(pages):
    _result(pages, "reward", commit="abc1234")
    run_all.write_summary(quick=False, outcomes={})
    page = run_all.PAGE.read_text()
    notes = "<!-- notes:start -->\nWhat we tried.\n<!-- notes:end -->"
    run_all.PAGE.write_text(page.replace("<!-- notes:start -->\n<!-- notes:end -->", notes))
    run_all.write_summary(quick=False, outcomes={})
    once = (run_all.README.read_text(), run_all.PAGE.read_text())
    assert notes in once[1]
    run_all.write_summary(quick=False, outcomes={})
    assert (run_all.README.read_text(), run_all.PAGE.read_text()) == once


def test_a_result_without_a_commit_gets_its_files_last_commit_marked():
    path = common.RESULTS / "step.json"
    if "commit" in json.loads(path.read_text()):
        pytest.skip("step.json records its commit")
    last = subprocess.run(
        ["git", "log", "-1", "--format=%h", "--", str(path)],
        cwd=common.ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert run_all.Source.read(path).commit == f"{last}*"


def test_a_readme_without_markers_is_refused_by_name(pages):
    run_all.README.write_text("# project\n")
    with pytest.raises(SystemExit, match=r"README\.md: needs the lines <!-- results:start --> and <!-- results:end"):
        run_all.write_summary(quick=False, outcomes={})


def test_the_commit_is_the_checkouts_head():
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=common.ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert common.commit_id() in (head, f"{head}-dirty")
