"""The command-line interface (typer): thin shells over the layers below."""
