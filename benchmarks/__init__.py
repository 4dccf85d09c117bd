"""rlflow's benchmarks: one module per measurement, plus the code they share.

Design decisions:
- A package, not a folder of scripts: every benchmark runs from the repository root as
  ``python -m benchmarks.bench_x`` and imports what it shares as ``from benchmarks import common``,
  so nothing patches ``sys.path``. A benchmark that starts another one (an arm in a fresh process,
  the TRL or vLLM runners in their own virtual environments) starts it the same way.
- Not part of the installed ``rlflow`` distribution: the benchmarks need the repository (its
  pipelines, data, warm start and results folder), so they run from a checkout.
- ``run_all`` runs them one after another and turns ``benchmarks/results/*.json`` into the
  README's results table and docs/benchmarks.md.
"""
