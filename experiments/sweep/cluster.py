"""A sweep on an existing Dask cluster: the scheduler's address checked and connected, and
batches of points run as Dask tasks.

An address where nothing listens, or where something that is not a Dask scheduler does, is
refused within seconds (ConfigError). A task that fails or is cancelled is submitted again (up
to :data:`MAX_TRIES` times, with backoff); when the scheduler is lost or the cluster has had no
workers for a while, every unfinished point is lost (not done).
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator, Sequence
from typing import Any

from tpsim.core.errors import ConfigError
from tpsim.experiments.sweep import tasks
from tpsim.experiments.sweep.grid import GridPoint
from tpsim.experiments.sweep.results import DASK_FAILED, infrastructure_error

log = logging.getLogger(__name__)

PROBE_S = 3.0  # a scheduler answers a TCP connection at once with its handshake
CONNECT_S = 10.0
WAIT_WORKERS_S = 30.0  # default: give up on a Dask cluster that has had no workers this long
POLL_S = 0.05


def _address(address: str) -> tuple[str, str, int]:
    """(scheme, host, port) of a scheduler address (ConfigError if it is not one)."""
    scheme, sep, rest = address.partition("://")
    if not sep:
        scheme, rest = "tcp", address
    host, colon, port = rest.rpartition(":")
    if scheme not in ("tcp", "tls") or not colon or not host or not port.isdigit():
        raise ConfigError(f"--scheduler={address}: must be tcp://HOST:PORT (or tls://)")
    if not 0 < int(port) < 65536:
        raise ConfigError(f"--scheduler={address}: port {port} is not in 1..65535")
    return scheme, host.strip("[]"), int(port)


def _probe(address: str) -> None:
    """Refuse within seconds an address where nothing listens, or where something that is
    not a Dask scheduler does (a Dask scheduler speaks first: its handshake frames)."""
    if address.startswith("inproc://"):  # a scheduler in this process (tests)
        return
    scheme, host, port = _address(address)
    try:
        with socket.create_connection((host, port), timeout=PROBE_S) as sock:
            if scheme != "tcp":
                return
            sock.settimeout(PROBE_S)
            try:
                head = sock.recv(8)
            except TimeoutError:
                head = b""
    except OSError as exc:
        raise ConfigError(f"--scheduler={address}: cannot connect ({exc})") from None
    if len(head) < 8 or int.from_bytes(head, "little") >= 2**32:  # frames, not text
        raise ConfigError(
            f"--scheduler={address}: not a Dask scheduler (no Dask handshake in {PROBE_S:g} s)"
        )


def quiet_dask() -> None:
    """Silence Dask's own loggers (which set their levels when ``distributed`` is imported):
    a lost scheduler or worker is reported by the sweep in one line, not as tracebacks."""
    try:
        import distributed  # noqa: F401
    except ImportError:
        return
    for name in list(logging.root.manager.loggerDict):
        if name == "distributed" or name.startswith("distributed."):
            logging.getLogger(name).setLevel(logging.CRITICAL + 1)


def connect(address: str) -> Any:
    """A Dask client of the scheduler at ``address`` (ConfigError within seconds if Dask is
    missing, the address is not a scheduler's or it does not answer)."""
    try:
        from distributed import Client
    except ImportError:
        raise ConfigError(
            f"--scheduler={address}: needs Dask; install tpsim[dask] (dask[distributed])"
        ) from None
    _probe(address)
    try:
        return Client(address, timeout=CONNECT_S, set_as_default=False)
    except Exception as exc:  # OSError, TimeoutError, or a protocol error of the peer
        raise ConfigError(f"--scheduler={address}: cannot connect ({exc!r})") from None


def _n_workers(client: Any) -> int | None:
    """Workers the scheduler had at its last report (the client refreshes it every 2 s)."""
    identity = getattr(client, "_scheduler_identity", None) or {}
    n = identity.get("n_workers", len(identity.get("workers", {})))
    return n if isinstance(n, int) else None


def dask_rows(
    points: Sequence[GridPoint], scheduler: Any, evaluate: tasks.Evaluate, wait_workers_s: float
) -> Iterator[list[tasks.Row]]:
    """Batches as Dask tasks; ``scheduler`` is an address (connected and closed here) or a
    client (left open). A task that fails (after Dask's own retries) or is cancelled is
    submitted again, up to :data:`MAX_TRIES` times with backoff. When the scheduler is lost,
    or the cluster has had no workers for ``wait_workers_s``, nothing more is submitted and
    every unfinished point is lost (not done)."""
    client = connect(scheduler) if isinstance(scheduler, str) else scheduler
    try:
        workers = max(1, sum(client.nthreads().values()))
        pending: dict[Any, tuple[list[GridPoint], int]] = {}
        later: list[tuple[float, list[GridPoint], int]] = []  # (when, batch, attempt)

        def submit(batch: list[GridPoint], attempt: int) -> None:
            f = client.submit(tasks.run_batch, evaluate, batch, pure=False)
            pending[f] = (batch, attempt)

        for b in tasks.batches(points, workers):
            submit(b, 1)
        why = ""
        idle_since: float | None = None
        while (pending or later) and not why:
            now = time.monotonic()
            if client.status != "running":
                why = f"{DASK_FAILED}: lost the connection to the scheduler"
                break
            n = _n_workers(client)
            idle_since = (idle_since or now) if n == 0 else None
            if idle_since is not None and now - idle_since >= wait_workers_s:
                why = f"{DASK_FAILED}: no workers for {wait_workers_s:g} s"
                break
            for when, batch, attempt in [x for x in later if x[0] <= now]:
                later.remove((when, batch, attempt))
                submit(batch, attempt)
            finished = [f for f in pending if f.status != "pending"]
            for f in finished:
                batch, attempt = pending.pop(f)
                if f.status == "finished":
                    try:
                        rows = f.result()
                    except Exception as exc:  # lost between the status and the result
                        rows = tasks.lost_rows(batch, f"{DASK_FAILED}: {exc!r}")
                else:
                    rows = tasks.lost_rows(batch, f"{DASK_FAILED}: {f.status}")
                f.release()
                if not rows or not infrastructure_error(rows[0]):
                    yield rows
                elif attempt < tasks.MAX_TRIES:
                    log.warning("dask task %s; retrying %d points", rows[0]["error"], len(batch))
                    later.append((now + tasks.backoff(attempt), batch, attempt + 1))
                else:
                    yield rows
            if not finished:
                time.sleep(POLL_S)
        if why:
            left = [p for batch, _ in pending.values() for p in batch]
            left += [p for _, batch, _ in later for p in batch]
            client.cancel(list(pending), force=True)
            yield tasks.lost_rows(left, why)
    finally:
        if client is not scheduler:
            client.close(timeout=CONNECT_S)
