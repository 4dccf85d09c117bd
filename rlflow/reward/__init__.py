"""Rule-based reward building blocks. ``text2sql``: execution accuracy of model-written SQL on SQLite databases.

- ``extract``: find the SQL in a response (fenced block, ``<answer>`` tags, bare text);
- ``sql_exec``: run untrusted SQL read-only, under a time limit and a row cap.

The ``text2sql_reward`` stage kind (``rlflow.stages.text2sql_reward``) scores a batch with them.
"""
