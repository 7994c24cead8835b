"""An ablation's runs as Ray tasks (``--launcher ray``): the same jobs, records and resume as
``--workers``, spread over whatever Ray cluster ``ray.init`` finds (``RAY_ADDRESS``, or a
local instance started here and stopped after). The runs are independent, so nothing but
the engine's own scheduling is needed: each task trains one job through the zoo's loop
and writes its record into the out folder, which every node must see (a shared file
system). A task whose worker or node dies is retried by Ray (``RETRIES``); a run's own
error (a divergence, a bad config) is not retried and stops the ablation, as with
``--workers``."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any

from zoo.ablate.plan import Job
from zoo.ablate.records import Context, read_record
from zoo.errors import ConfigError, ZooError, printable

#: Times Ray runs a task again after its worker process or node is lost.
RETRIES = 3
#: Seconds the head node ``RAY_ADDRESS`` names has to accept a connection before the
#: ablation is refused: ``ray.init`` itself waits on an address no one answers at without end.
CONNECT_TIMEOUT = 10.0


def ray_module() -> Any:
    """``ray``, or a ZooError that says how to install it."""
    try:
        import ray
    except ImportError as err:
        raise ConfigError("--launcher ray needs Ray: `pip install 'zoo-lm[ray]'`") from err
    return ray


def check_address(address: str | None, timeout: float = CONNECT_TIMEOUT) -> None:
    """Refuse a ``RAY_ADDRESS`` that is not ``HOST:PORT`` (``ray://HOST:PORT`` for Ray
    Client; ``auto`` and ``local`` pass as Ray reads them), or whose port accepts no
    connection within ``timeout`` seconds."""
    if not address or address in ("auto", "local"):
        return
    shown = printable(address, 120)
    host, colon, port = address.removeprefix("ray://").rpartition(":")
    if not (host and colon and port.isdigit() and 0 < int(port) < 65536):
        raise ConfigError(
            f"RAY_ADDRESS={shown} is not HOST:PORT (or ray://HOST:PORT, auto, local); set it to the head node's "
            f"address (`ray start --head` prints it), or unset it to start Ray here"
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as err:
        raise ConfigError(
            f"RAY_ADDRESS={shown}: no Ray head answered at {printable(host, 80)}:{port} within {timeout:g} s "
            f"({printable(err.strerror or str(err), 80)}); start the cluster (`ray start --head`), fix RAY_ADDRESS, "
            f"or unset it to start Ray here"
        ) from err


def run_on_ray(
    jobs: list[Job],
    context: Context,
    work: Callable[[Job, Context], None],
    on_done: Callable[[Job, float | None], None] | None,
) -> None:
    """Run ``work(job, context)`` for every job as a Ray task (one CPU each, or one GPU each
    on a CUDA device); ``on_done`` hears each finished job and its final loss."""
    ray = ray_module()
    if not jobs:
        return
    started = not ray.is_initialized()
    if started:
        address = os.environ.get("RAY_ADDRESS")
        check_address(address)
        ray.init(address=address or None, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        gpus = 1 if context.device.startswith("cuda") else 0
        task = ray.remote(num_cpus=context.threads or 1, num_gpus=gpus, max_retries=RETRIES)(work)
        pending = {task.remote(job, context): job for job in jobs}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            job = pending.pop(done[0])
            try:
                ray.get(done[0])
            except ray.exceptions.RayTaskError as err:  # the run's own error, raised again as itself
                cause = err.as_instanceof_cause()
                for ref in pending:
                    ray.cancel(ref)
                if isinstance(cause, ZooError):
                    raise cause from None
                raise
            except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError) as err:
                raise ZooError(
                    f"run {job.label!r} was lost {RETRIES + 1} times (its worker or node died: {err}); the finished "
                    "runs are kept: run the same command again to train the rest"
                ) from err
            if on_done is not None:
                on_done(job, read_record(job, context)["final_val_loss"])
    finally:
        if started:
            ray.shutdown()
