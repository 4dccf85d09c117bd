"""Landlock: the kernel's own bound on what a contained worker may write and run, where the host has it.

``restrict_to(folder)`` lets the calling thread, and the threads and processes it starts afterwards,
write only beneath ``folder`` and execute no file, for good; reading stays free. It returns None,
or why it could not (the audit hook is then the only guard). Design notes: docs/design/sandbox.md.
"""

from __future__ import annotations

import ctypes
import os
import sys

# syscall numbers allocated after the per-architecture tables were unified: the same everywhere
_CREATE_RULESET, _ADD_RULE, _RESTRICT_SELF = 444, 445, 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38  # required of an unprivileged process before it restricts itself
EXECUTE = 1 << 0
# ABI 1: write_file, remove_dir, remove_file, make_char, make_dir, make_reg, make_sock, make_fifo, make_block,
# make_sym; ABI 2 adds refer (link or rename into another folder), ABI 3 truncate
_WRITES = {1: sum(1 << bit for bit in (1, 4, 5, 6, 7, 8, 9, 10, 11, 12)), 2: 1 << 13, 3: 1 << 14}


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]  # the ABI 1 size: the kernel takes it from any later ABI


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # the kernel's struct is packed
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def restrict_to(folder: str) -> str | None:
    """From now on, files are written only beneath ``folder`` and none is executed; None, or why not."""
    if not sys.platform.startswith("linux"):
        return f"Landlock is Linux's ({sys.platform} has none)"
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long

    def failed(what: str) -> str:
        return f"{what}: {os.strerror(ctypes.get_errno())}"

    abi = libc.syscall(_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    if abi < 1:
        return failed("the kernel offers no Landlock")
    writes = sum(bits for version, bits in _WRITES.items() if version <= abi)
    attr = _RulesetAttr(writes | EXECUTE)  # handled and never allowed: no file is executed, anywhere
    ruleset = libc.syscall(_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), 0)
    if ruleset < 0:
        return failed("Landlock refused the ruleset")
    try:
        beneath = os.open(folder, os.O_PATH | os.O_CLOEXEC)
        try:
            rule = _PathBeneathAttr(writes, beneath)
            if libc.syscall(_ADD_RULE, ctypes.c_int(ruleset), _RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
                return failed(f"Landlock refused the rule for {folder}")
        finally:
            os.close(beneath)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return failed("prctl(PR_SET_NO_NEW_PRIVS) failed")
        if libc.syscall(_RESTRICT_SELF, ctypes.c_int(ruleset), 0) != 0:
            return failed("Landlock refused to restrict the process")
    finally:
        os.close(ruleset)
    return None
