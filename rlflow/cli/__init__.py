"""The command-line interface (typer): thin shells over the layers below."""

# Set by ``rlflow.cli.main.main``: this process is the ``rlflow`` command and ends with it, so
# ``rlflow run`` may fork a supervising parent (never inside a process that calls the app itself).
standalone = False
