"""Text on its way to a tokenizer: valid Unicode, whatever a model or a tool wrote.

A JSON ``\\ud800`` escape gives a Python string a lone surrogate (a call's name or argument key,
a tool's answer), which no tokenizer encodes (the Rust tokenizers raise TypeError) and no UTF-8
file or pipe takes; ``valid_text`` replaces each with U+FFFD, as a UTF-8 decoder replaces a bad byte.
"""

from __future__ import annotations


def valid_text(text: str) -> str:
    """``text`` with each lone surrogate as U+FFFD (a pair written as two escapes becomes its character)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text
