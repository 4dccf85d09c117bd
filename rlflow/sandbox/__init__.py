"""The sandbox: a supervised child process that serves calls, shared by reward functions and tools.

- ``process``: ``Sandbox``, the parent's handle (start, deadline per call, restart, stop);
- ``supervisor``: the subreaper between parent and worker; ``worker``: the worker's loop and limits;
- ``protocol``: the JSON messages, checked; ``guard`` and ``landlock``: a contained worker's bounds.
Design notes: docs/design/sandbox.md.
"""
