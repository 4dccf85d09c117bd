"""Starting or joining Ray; whether its nodes have room for every pool is ``rlflow.runtime.fit``'s check.

Without ``ray.address`` an embedded local Ray starts; with one, the cluster is probed and joined.
Design notes: docs/design/pools.md.
"""

from __future__ import annotations

import logging
import os
import socket

from rlflow.errors import ClusterUnreachable
from rlflow.runtime.fit import Demand

log = logging.getLogger("rlflow.runtime")
EMBEDDED_START_ATTEMPTS = 3


def start_ray(project, demands: list[Demand]) -> bool:
    """Start or join Ray for pools that need ``demands``; True when this call started it (the caller shuts it down)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    import ray

    if ray.is_initialized():
        return False
    kwargs = dict(project.ray.init or {})
    kwargs.setdefault("include_dashboard", False)
    kwargs.setdefault("log_to_driver", bool(os.environ.get("RLFLOW_DEBUG")))
    kwargs.setdefault("configure_logging", True)
    kwargs.setdefault("logging_level", logging.WARNING)
    if project.ray.namespace:
        kwargs.setdefault("namespace", project.ray.namespace)
    if project.ray.address:
        _join(ray, project.ray.address, project.ray.connect_timeout_s, kwargs)
        relay_ray_errors(ray)
        return True
    # Ray warns at every embedded start that it enabled its default (token authentication): not news
    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
    cores = machine_cores()
    cpu_demand = sum(d.workers * d.cpus for d in demands)
    warning = oversubscription(demands, cores)
    if warning:
        log.warning(warning)
    cpus = project.ray.num_cpus or max(cores, int(-(-cpu_demand // 1)))
    for _ in range(EMBEDDED_START_ATTEMPTS - 1):
        try:
            ray.init(address="local", num_cpus=cpus, **kwargs)
            break
        except Exception as exc:  # Ray raises a bare Exception when its raylet misses a fixed 30 s start window
            if "timed out during startup" not in str(exc):
                raise
            log.warning("the embedded Ray did not start in time (a busy machine?); trying again")
            ray.shutdown()
    else:
        ray.init(address="local", num_cpus=cpus, **kwargs)  # the last attempt: its failure is the run's
    stop_idle_daemons(ray, kwargs)
    relay_ray_errors(ray)
    return True


def relay_ray_errors(ray) -> None:
    """Send the errors Ray's cluster pushes to the driver to rlflow's log, one line each (shown with ``-v``),
    instead of Ray's stdout.

    Ray prints each as it arrives: a raylet's death is its last 20 log lines, then the node "marked dead"
    notice, all before rlflow has said what failed. The failure they cause reaches the run as a dead worker,
    reported once, naming the worker, its Ray node and why (``RayExecutor``). Ray has no switch for it; its
    listener thread looks ``print_to_stdstream`` up in its module for every message, so that name is
    wrapped (``RLFLOW_DEBUG=1`` leaves it alone, as does a Ray release without it). Worker logs that
    ``log_to_driver`` streams do not go through it.
    """
    module = getattr(getattr(ray, "_private", None), "worker", None)
    printer = getattr(module, "print_to_stdstream", None)
    if os.environ.get("RLFLOW_DEBUG") or printer is None or getattr(printer, "relays", False):
        return

    def relay(data: dict, ignore_prefix: bool) -> None:
        if data.get("pid") != "raylet":
            printer(data, ignore_prefix)
            return
        for message in data.get("lines", []):
            first = next((line.strip() for line in str(message).splitlines() if line.strip()), "")
            log.info("Ray: %s", first[:300])

    relay.relays = True
    module.print_to_stdstream = relay


def stop_idle_daemons(ray, kwargs: dict) -> None:
    """Stop the embedded Ray's Python daemons that serve nothing in this run.

    The autoscaler monitor (a one-node local Ray never scales), the log monitor unless worker logs
    stream to the driver (``log_to_driver``), and the dashboard's API server unless the dashboard
    is on (without it, the server hosts only usage statistics, off here unless
    ``RAY_USAGE_STATS_ENABLED`` says otherwise): about 160 MiB of PSS together (a default run's
    peak went from 1.48 to 1.32 GiB). Ray has no public switch for them, so this goes through the
    node object ``ray.init`` keeps; a Ray release without it leaves them running, which costs
    memory only.
    """
    wanted = {
        "monitor": True,
        "log_monitor": not kwargs.get("log_to_driver"),
        "dashboard": not kwargs.get("include_dashboard") and os.environ.get("RAY_USAGE_STATS_ENABLED") == "0",
    }
    try:
        node = ray._private.worker._global_node
        for name in (name for name, stop in wanted.items() if stop):
            getattr(node, f"kill_{name}")(check_alive=False)
            log.debug("stopped Ray's idle %s", name)
    except Exception as exc:  # another Ray release's internals: the daemons keep running
        log.debug("left Ray's idle daemons running: %r", exc)


def machine_cores() -> int:
    """The cores this process may run on (a container's or taskset's limit, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def oversubscription(demands: list[Demand], cores: int) -> str | None:
    """A warning when the pools reserve more CPUs than the machine has, naming each pool's share; else None."""
    want = sum(d.workers * d.cpus for d in demands)
    if want <= cores:
        return None
    parts = ", ".join(f"{d.pool} {d.workers * d.cpus:g}" for d in demands if d.workers * d.cpus)
    return (
        f"the pools reserve {want:g} CPUs ({parts}) and this machine has {cores} cores: workers run one torch "
        "thread per reserved CPU, so threads share cores and steps slow down many times over when anything else "
        f"runs; lower cpus_per_worker or workers under resources: so they sum to {cores} or less"
    )


def _join(ray, address: str, timeout_s: float, kwargs: dict) -> None:
    """Join the cluster at ``address``; every way it can fail is one ``ClusterUnreachable`` line."""
    where = f"the Ray cluster at {address!r} (ray.address in rlflow.yaml)"
    if _probe(address, timeout_s, where) and "://" not in address:  # a GCS address (Ray Client's is not one)
        _check_token(address, where)
    try:
        ray.init(address=address, **kwargs)
    except Exception as exc:  # Ray raises ConnectionError, RuntimeError, ValueError or its own errors here
        ray.shutdown()
        if _refused_token(exc):
            raise ClusterUnreachable(_token_refused(where)) from exc
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ClusterUnreachable(
            f"cannot join {where}: {first} (check the address and port, that the cluster runs the same Ray "
            f"version ({ray.__version__}), or remove ray.address to run on a local Ray)"
        ) from exc


def _token_refused(where: str) -> str:
    return (
        f"{where} refused this driver's token: set RAY_AUTH_MODE=token and the cluster's token in "
        "RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH (or ~/.ray/auth_token) before `rlflow run`"
    )


def _refused_token(exc: BaseException | None) -> bool:
    """Whether Ray's error is a refused token: Ray 2.60 wraps its ``AuthenticationError`` in a ConnectionError
    over a RuntimeError that holds it only as traceback text."""
    for _ in range(10):
        if exc is None:
            return False
        if type(exc).__name__ == "AuthenticationError" or "InvalidAuthToken" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _check_token(address: str, where: str) -> None:
    """Ask the cluster for its id once, before ``ray.init``: a refused token is known in about a second, where
    ``ray.init`` retries it for 20 s and prints a C++ warning each time. Any other failure is left to ``ray.init``."""
    try:
        from ray._raylet import GcsClient
    except ImportError:  # another Ray release: ray.init reports it
        return
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:  # the C++ client's one warning line about the refusal
            os.dup2(null.fileno(), 2)
            try:
                GcsClient(address=address).cluster_id  # noqa: B018 (the call is the check)
            except Exception as exc:
                refused = _refused_token(exc)
            else:
                refused = False
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    if refused:
        raise ClusterUnreachable(_token_refused(where))


def _probe(address: str, timeout_s: float, where: str) -> bool:
    """Fail fast when ``host:port`` takes no TCP connection; False when the address names no port ("auto" is
    left to Ray, which looks locally)."""
    target = address.split("://", 1)[-1]
    host, sep, port = target.rpartition(":")
    if not sep or not port.isdigit():
        return False
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        reason = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise ClusterUnreachable(
            f"cannot reach {where}: {reason} within ray.connect_timeout_s={timeout_s:g}; check that `ray start "
            "--head` runs there, the host name and port (the GCS port, 6379 by default), and firewalls"
        ) from None
    return True
