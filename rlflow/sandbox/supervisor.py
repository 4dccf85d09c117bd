"""The supervisor: the process between the parent and the worker, which runs no user code.

It makes itself a child subreaper, forks the worker (``child``'s ``main``), copies the worker's
output to a capped log, and when the worker ends, on SIGTERM, or when the parent is gone, kills
every descendant and reports how the worker ended. Design notes: docs/design/sandbox.md.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import select
import signal
import sys
import time

_PR_SET_CHILD_SUBREAPER = 36
_KILL_ROUNDS = 100  # passes over the process tree: a process forking while it is killed is caught next pass


def _become_subreaper() -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def describe(status: int) -> str:
    """How a process ended, from its wait status."""
    code = os.waitstatus_to_exitcode(status)
    if code >= 0:
        return f"exited with code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = "unknown"
    if -code == signal.SIGKILL:  # the address-space cap raises MemoryError: a SIGKILL is the machine's memory
        name += ": most often the kernel's out-of-memory killer"
    return f"killed by signal {-code} ({name})"


def descendants(root: int) -> list[int]:
    """Live (not zombie) descendants of ``root``, from /proc."""
    children: dict[int, list[int]] = {}
    zombies = set()
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:  # it ended while we looked
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
        if fields[0] == "Z":
            zombies.add(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            todo.append(child)
            if child not in zombies:
                found.append(child)
    return found


class _Supervisor:
    def __init__(self, status_fd: int, output_fd: int, wake_fd: int, cap: int) -> None:
        self.worker = 0
        self.status_fd = status_fd
        self.output_fd = output_fd
        self.wake_fd = wake_fd
        self.log_fd = 2
        self.cap = cap
        self.dropped = 0
        self.worker_status: int | None = None
        self.stopping = False

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.worker:
                self.worker_status = status

    def kill_all(self) -> None:
        """SIGKILL every descendant until none is left (orphans of the killed come to us: we are their reaper)."""
        if self.worker_status is None:  # the worker first, even where /proc cannot list the rest
            try:
                os.kill(self.worker, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for _ in range(_KILL_ROUNDS):
            alive = descendants(os.getpid())
            if not alive:
                break
            for pid in alive:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.005)
            self.reap()
        self.reap()

    def copy_output(self, data: bytes) -> None:
        room = max(0, self.cap - os.fstat(self.log_fd).st_size) if self.log_fd != 2 else self.cap
        kept = data[:room]
        if kept:
            os.write(self.log_fd, kept)
            if self.log_fd == 2:
                self.cap -= len(kept)
        self.dropped += len(data) - len(kept)

    def run(self, parent: int) -> None:
        open_fds = [self.output_fd, self.wake_fd]
        while self.worker_status is None:
            self.reap()
            if self.worker_status is not None:
                break
            if self.stopping or os.getppid() != parent:
                self.stopping = True
                self.kill_all()
                break
            readable, _, _ = select.select(open_fds, [], [], 1.0)
            for fd in readable:
                data = os.read(fd, 65536)
                if fd == self.wake_fd:
                    continue
                if data:
                    self.copy_output(data)
                else:
                    open_fds.remove(fd)
        self.kill_all()
        self.drain()
        if self.dropped:
            os.write(self.log_fd, f"\n[rlflow: {self.dropped} more bytes of output dropped past the cap]\n".encode())
        said = "stopped" if self.worker_status is None else describe(self.worker_status)
        try:
            os.write(self.status_fd, said.encode())
        except OSError:  # the runner is gone
            pass

    def drain(self) -> None:
        os.set_blocking(self.output_fd, False)
        try:
            while data := os.read(self.output_fd, 65536):
                self.copy_output(data)
        except BlockingIOError:  # a descendant we could not kill holds the pipe open: stop here
            pass


def main(conn_fd: int, status_fd: int, log_path: str, cap: int, child: str) -> None:
    """Fork the worker serving ``conn_fd`` with ``child``'s ``main`` (the reward functions', or the tools')."""
    parent = os.getppid()
    _become_subreaper()
    output_r, output_w = os.pipe()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    supervisor = _Supervisor(status_fd, output_r, wake_r, cap)
    signal.signal(signal.SIGTERM, lambda *_: setattr(supervisor, "stopping", True))
    signal.signal(signal.SIGCHLD, lambda *_: None)  # only to wake the select below
    signal.set_wakeup_fd(wake_w)
    worker = os.fork()
    if worker == 0:
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            for signum in (signal.SIGTERM, signal.SIGCHLD):
                signal.signal(signum, signal.SIG_DFL)
            for fd in (status_fd, output_r, wake_r, wake_w):
                os.close(fd)
            os.dup2(output_w, 1)
            os.dup2(output_w, 2)
            os.close(output_w)
            importlib.import_module(child).main(conn_fd)
            code = 0
        finally:
            os._exit(code)
    supervisor.worker = worker
    os.close(conn_fd)
    os.close(output_w)
    if log_path:
        supervisor.log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    supervisor.run(parent)
    os._exit(0)
