"""Reward building blocks, and the machinery that runs Python reward functions.

Text-to-SQL:
- ``extract``: find the SQL in a response (fenced block, ``<answer>`` tags, bare text);
- ``sql_exec``: run untrusted SQL read-only, under a time limit and a row cap.

The ``text2sql_reward`` stage kind (``rlflow.stages.text2sql_reward``) scores a batch with them.

Reward functions (verl's ``compute_score(data_source, solution_str, ground_truth, extra_info)``),
which the ``reward_function`` stage kind runs:
- ``functions``: parse, load and check ``module:callable`` / ``file.py:callable`` references;
- ``function_runner``, ``function_supervisor`` and ``function_child``: call them in a supervised
  child process under a deadline, with capped memory, output and metrics;
- ``function_scores``: weighted sums, ``reward_extra`` keys, metrics and failure handling;
- built-in functions: ``math_answer`` (GSM8K ``####`` and ``\\boxed{}`` answers) and
  ``sql_answer`` (execution accuracy, like ``text2sql_reward``).
"""
