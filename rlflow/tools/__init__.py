"""Tools for multi-turn rollouts, in verl's formats: configs, the hermes call parser, schemas and the tool process.

Below the backends (whose agent loop calls tools) and above the data layer. The tool process
(``child``) is the reward functions' child-process runner serving tools instead, contained by
``guard`` (an audit hook) and ``landlock`` (the kernel's bound, where the host has it).
"""
