"""Rule-based rewards. ``text2sql``: execution accuracy of model-written SQL on SQLite databases.

- ``extract``: find the SQL in a response (fenced block, ``<answer>`` tags, bare text);
- ``sql_exec``: run untrusted SQL read-only, under a time limit and a row cap;
- ``stage``: the ``text2sql_reward`` stage's work on a batch (scores on the last response token).
"""
