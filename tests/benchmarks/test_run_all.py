"""run_all: which benchmarks a run takes and how long it says it will take; its summary: the README's
results table, docs/benchmarks.md and the step picture, written from result files.

No benchmark runs here: each test writes small result files of its own (or reads the committed
ones) and lets the real summary code turn them into pages in a temporary folder.
"""

from __future__ import annotations

import json
import math
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


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=common.ROOT, capture_output=True, text=True, check=True).stdout.strip()


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
        "stale: measured on abc1234 (2026-01-02), which this checkout lacks",
    ]
    assert "Where these figures come from: a shared CPU machine without a GPU" in readme
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


def test_a_row_says_stale_in_words_unless_measured_on_the_code_it_ships_with():
    head = git("rev-parse", "--short", "HEAD")
    first = git("rev-list", "--max-parents=0", "--abbrev-commit", "HEAD").splitlines()[0]
    assert run_all.measured_on(head, "2026-12-05") == f"{head}, 2026-12-05", "no code changed since HEAD"
    assert run_all.measured_on(head, "") == head
    assert run_all.measured_on(first, "2026-12-01") == f"stale: measured on {first} (2026-12-01), code changed since"
    assert (
        run_all.measured_on(f"{head}-dirty", "2026-12-01")
        == f"stale: measured on {head} (2026-12-01) with uncommitted code changes"
    )
    assert run_all.measured_on("333d1c4*", "2026-11-29") == "stale: commit not recorded (file from 333d1c4, 2026-11-29)"
    assert run_all.measured_on("333d1c4*", "") == "stale: commit not recorded (file from 333d1c4)"
    assert run_all.measured_on("unknown", "") == "stale: commit not recorded"
    assert not any("*" in row["commit"] for row in run_all.summary_rows(run_all.load_sources(quick=False)))


def test_the_sentence_beside_the_table_says_where_the_figures_come_from(pages):
    _result(pages, "compile", machine={"cpus": 2})
    _result(pages, "step", machine={"cpus": 2})
    sources = run_all.load_sources(quick=False)
    where = run_all.origin(sources)
    assert where.startswith("Where these figures come from: a shared 2-core CPU machine without a GPU, ")
    assert "(the shipped warm start has 3.5M)" in where and "no GPU figures" in where
    run_all.write_summary(quick=False, outcomes={})
    assert where in run_all.README.read_text() and where in run_all.PAGE.read_text()
    _result(pages, "gpu", machine={"cpus": 16})
    assert "2-core CPU machine without a GPU (the gpu rows aside)" in run_all.origin(run_all.load_sources(quick=False))


def test_a_ratio_is_judged_round_by_round_never_on_pooled_medians():
    """step.json's two rounds: rlflow / loop was 1.42 and 1.04, while the pooled medians gave 0.95."""
    row = common.round_ratio_row("step", "rlflow / loop", [73.4, 33.7], [51.8, 32.4], "<= 1.05", lambda r: r <= 1.05)
    assert row["met"] is False and row["goal"] == "<= 1.05 in every round"
    assert row["measured_text"] == "1.23x (rounds 1.04-1.42)" and "median of per-round ratios" in row["figure"]
    assert common.round_ratio_row("x", "y", [1.0, 1.02], [1.0, 1.0], "<= 1.05", lambda r: r <= 1.05)["met"] is True
    assert common.round_ratio_row("x", "y", [None], [1.0], "<= 1", lambda r: True)["met"] is None
    committed = json.loads((common.RESULTS / "step.json").read_text())
    if committed.get("arms", {}).get("rlflow", {}).get("step_s_per_round") == [73.36450472800061, 33.74126686700038]:
        (loop_row, _) = run_all.report_rows("step", committed)
        assert loop_row["met"] is False and "rounds 1.04-1.42" in loop_row["measured_text"]


def test_make_bench_refuses_a_tree_with_uncommitted_code(monkeypatch, capsys):
    monkeypatch.setattr(common, "commit_id", lambda: "abc1234-dirty")
    monkeypatch.setattr(run_all, "run_one", lambda *a: pytest.fail("a benchmark ran on a dirty tree"))
    assert run_all.main(["--only", "validate"]) == 2
    assert "uncommitted code changes" in capsys.readouterr().err


def test_the_learning_benchmark_refuses_a_tree_with_uncommitted_code(monkeypatch, capsys):
    from benchmarks import bench_learning

    monkeypatch.setattr(common, "commit_id", lambda: "abc1234-dirty")
    monkeypatch.setattr(bench_learning, "run_seed", lambda *a: pytest.fail("a seed ran on a dirty tree"))
    assert bench_learning.main([]) == 2
    assert "--allow-dirty" in capsys.readouterr().err


# ---- which benchmarks run, and how long they will take ------------------------------------------
def test_make_bench_leaves_the_learning_runs_to_make_bench_learning():
    full = run_all.selected(run_all.parse_args([]))
    assert "gpu" in full and "step" in full and not any(n.startswith("learning") for n in full)
    assert run_all.selected(run_all.parse_args(["--learning"])) == list(run_all.LEARNING)
    assert set(full) | set(run_all.LEARNING) == set(run_all.BENCHMARKS)
    assert run_all.selected(run_all.parse_args(["--quick"])) == list(run_all.BENCHMARKS), "--quick: every one"
    assert run_all.selected(run_all.parse_args(["--learning", "--skip", "learning_agent"]))[-1] == "learning_async"
    assert run_all.selected(run_all.parse_args(["--only", "step", "learning"])) == ["step", "learning"]
    with pytest.raises(SystemExit):
        run_all.parse_args(["--only", "step", "--learning"])


def test_every_benchmark_has_a_default_estimate_and_make_bench_fits_an_afternoon():
    assert set(run_all.MINUTES) == set(run_all.BENCHMARKS)
    assert sum(run_all.MINUTES[n] for n in run_all.selected(run_all.parse_args([]))) + run_all.TRL_SETUP_MINUTES <= 50


def test_the_estimate_uses_the_last_measured_durations_and_defaults_for_the_rest(pages):
    assert run_all.estimate(["step", "load"], trl_setup=False) == (
        f"2 benchmarks, about {math.ceil(run_all.MINUTES['step'] + run_all.MINUTES['load'])} minutes "
        "(estimated: none measured yet)"
    )
    run_all.record_duration("step", 7.2)
    assert run_all.estimate(["step", "load"], trl_setup=False) == (
        f"2 benchmarks, about {math.ceil(7.2 + run_all.MINUTES['load'])} minutes "
        "(from the last measured durations; estimated for load, not measured yet)"
    )
    run_all.record_duration("load", 4.1)
    run_all.record_duration("step", 6.4)  # the latest run counts
    assert json.loads((pages / "durations.json").read_text()) == {"load": 4.1, "step": 6.4}
    assert run_all.estimate(["step", "load"], trl_setup=False) == (
        "2 benchmarks, about 11 minutes (from the last measured durations)"
    )
    assert run_all.estimate(["step"], trl_setup=True).endswith(", creating .venv-trl first included)")


def test_a_full_run_says_its_estimate_first_and_records_what_each_benchmark_took(pages, monkeypatch, capsys):
    outcomes = {"compile": 0, "reward": 1}
    monkeypatch.setattr(common, "commit_id", lambda: "abc1234")
    monkeypatch.setattr(run_all, "run_one", lambda name, quick, log_dir: {"exit_code": outcomes[name], "minutes": 0.5})
    assert run_all.main(["--only", "compile", "reward"]) == 1
    assert capsys.readouterr().out.startswith("2 benchmarks, about 2 minutes (estimated: none measured yet)\n")
    assert json.loads((pages / "durations.json").read_text()) == {"compile": 0.5}, "a failed run measures nothing"


# ---- the step picture --------------------------------------------------------------------------
def _step_result(folder, trl_rounds):
    arms = {
        "rlflow": {"step_s_median": 5.0, "step_s_per_round": [5.2, 4.9, 5.0]},
        "loop": {"step_s_median": 4.8, "step_s_per_round": [4.9, 4.7, 4.8]},
        "trl": {"step_s_median": None, "step_s_per_round": trl_rounds},
    }
    _result(folder, "step", commit="abc1234", model="tiny", rounds=3, arms=arms)


def test_the_step_section_shows_the_rounds_as_a_picture_drawn_only_when_the_result_changed(pages):
    _step_result(pages, [None, None, None])  # TRL not installed: its arm is drawn as "not run"
    run_all.write_summary(quick=False, outcomes={})
    picture = run_all.PAGE.with_name("step_time.png")
    drawn = picture.read_bytes()
    assert drawn.startswith(b"\x89PNG") and b"matplotlib" not in drawn, "no software version: the same bytes anywhere"
    page = run_all.PAGE.read_text()
    section = page[page.index("## Step time") :]
    assert "](step_time.png)" in section.split("\n## ")[0]
    picture.write_bytes(drawn + b"kept")  # as another matplotlib would have drawn it
    run_all.write_summary(quick=False, outcomes={})
    assert picture.read_bytes() == drawn + b"kept", "the same result file: the picture is left alone"
    _step_result(pages, [15.0, 16.0, 14.0])
    run_all.write_summary(quick=False, outcomes={})
    assert picture.read_bytes() not in (drawn, drawn + b"kept")
    again = picture.read_bytes()
    picture.unlink()
    run_all.write_summary(quick=False, outcomes={})
    assert picture.read_bytes() == again, "deterministic"


def test_without_a_step_result_there_is_no_picture_and_no_section(pages):
    _result(pages, "compile")
    run_all.write_summary(quick=False, outcomes={})
    assert not run_all.PAGE.with_name("step_time.png").exists() and "## Step time" not in run_all.PAGE.read_text()
