"""Reward building blocks, and the machinery that runs Python reward functions.

Text-to-SQL (``extract``, ``sql_exec``), reward functions of verl's signature (``functions``; ``function_calls``
runs them in ``rlflow.sandbox``) and built-in ones (``math_answer``, ``sql_answer``).
Design notes: docs/design/reward.md.
"""
