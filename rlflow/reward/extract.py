"""Find the SQL in a model's response.

Modes (``text2sql_reward``'s ``extract``): ``fenced`` (the last SQL fenced block), ``answer_tag`` (the last
``<answer>...</answer>``), ``bare`` (a response that opens with a query keyword) and ``auto`` (the first that
finds something). A missing answer is ``None``. Design notes: docs/design/reward.md.
"""

from __future__ import annotations

import re

_SQL_TAGS = ("sql", "sqlite", "")
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)
_QUERY_START = re.compile(r"\s*\(*\s*(select|with|values)\b", re.I)

MODES = ("auto", "fenced", "answer_tag", "bare")


def _clean(sql: str) -> str | None:
    sql = sql.strip()
    return sql or None


def _block_sql(block: str) -> str | None:
    """The SQL of one fenced block's inside (tag line included), or None if it is tagged otherwise."""
    head, newline, body = block.partition("\n")
    if newline:
        return _clean(body) if head.strip().lower() in _SQL_TAGS else None
    tag, _, rest = block.strip().partition(" ")  # one-line block: ```sql SELECT 1```
    if tag.lower() in _SQL_TAGS:
        return _clean(rest)
    return bare(block)


def fenced(text: str) -> str | None:
    # Fences pair up in order; parts[1], parts[3], ... lie between an opening and a closing fence.
    parts = text.split("```")
    for block in reversed(parts[1 : len(parts) - 1 : 2]):
        sql = _block_sql(block)
        if sql is not None:
            return sql
    return None


def answer_tag(text: str) -> str | None:
    answers = _ANSWER.findall(text)
    if not answers:
        return None
    return fenced(answers[-1]) or _clean(answers[-1])


def bare(text: str) -> str | None:
    return _clean(text) if _QUERY_START.match(text) else None


_EXTRACTORS = {"fenced": fenced, "answer_tag": answer_tag, "bare": bare}


def extract_sql(text: str, mode: str = "auto") -> str | None:
    """The SQL in ``text`` under ``mode`` (see the module docstring), or None."""
    if mode == "auto":
        for extractor in (fenced, answer_tag, bare):
            sql = extractor(text)
            if sql is not None:
                return sql
        return None
    if mode not in _EXTRACTORS:
        raise ValueError(f"unknown extract mode {mode!r}; choose one of {', '.join(MODES)}")
    return _EXTRACTORS[mode](text)
