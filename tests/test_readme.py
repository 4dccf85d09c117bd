"""The README is the front door: its set-up and three commands are there, and its results table is
the one ``python -m benchmarks.run_all --summary-only`` generates from benchmarks/results/*.json."""

from __future__ import annotations

from benchmarks import common, run_all

README = (common.ROOT / "README.md").read_text()


def test_the_readme_gives_the_set_up_and_the_three_commands():
    for command in (
        "make run",
        "make test",
        "rlflow validate pipelines/bird_grpo.yaml",
        "rlflow graph pipelines/bird_grpo.yaml --render",
        "rlflow run pipelines/bird_grpo.yaml",
    ):
        assert command in README, f"README.md no longer shows `{command}`"


def test_the_readme_results_table_is_generated_from_the_result_files():
    start, end = (README.index(marker) for marker in run_all.TABLE_MARKERS)
    shown = README[start : end + len(run_all.TABLE_MARKERS[1])]
    sources = run_all.load_sources(quick=False)
    generated = run_all.readme_block(run_all.summary_rows(sources), run_all.origin(sources))
    assert shown == generated, (
        "README.md's results table differs from benchmarks/results/*.json: "
        "run python -m benchmarks.run_all --summary-only"
    )
