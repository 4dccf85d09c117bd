"""A reward module that cannot be imported (for the validation tests)."""

raise RuntimeError("this module needs a GPU")
