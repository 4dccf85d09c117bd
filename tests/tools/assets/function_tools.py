"""A verl @function_tool file, used unchanged by the tests."""

from verl.tools.function_tool import function_tool


@function_tool
def multiply(a: int, b: int) -> str:
    """Multiply two integers.

    Args:
        a: the first factor
        b: the second factor
    """
    return str(a * b)


@function_tool("shout")
def upper(text: str) -> tuple:
    """Upper-case a text.

    Args:
        text: what to shout
    """
    return text.upper(), 1.0, {"length": len(text)}
