"""Tools for multi-turn rollouts, in verl's formats: configs, the hermes call parser, schemas and the tool process.

Below the backends (whose agent loop calls tools) and above the data layer. The tool process
(``child``) is the sandbox (``rlflow.sandbox``) serving tools, contained by its ``guard`` (an
audit hook) and ``landlock`` (the kernel's bound, where the host has it).
"""
