"""Running an ablation's jobs: each trains through the zoo's one loop (``training.fit``)
and leaves its record, in this process, in worker processes, or as this rank's share of a
``torchrun`` launch (the process group is ``training.distributed``'s)."""

from __future__ import annotations

import datetime
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from queue import Empty
from typing import Any

import torch

from zoo.ablate.cluster import run_on_ray
from zoo.ablate.diagnostics import Probe
from zoo.ablate.lengths import length_losses
from zoo.ablate.options import TUNE_HELD_OUT
from zoo.ablate.plan import Job
from zoo.ablate.records import (
    LOSS_LIMIT,
    Context,
    distrust,
    past_limit,
    read_record,
    record_body,
    write_record,
)
from zoo.checkpoint import save
from zoo.errors import ConfigError, DivergenceError, ZooError, printable
from zoo.nn.factory import build
from zoo.nn.registry import Registry, default_registry
from zoo.training import fit  # the zoo's one training loop: every run goes through here
from zoo.training.distributed import World, barrier, init_world, launcher_int

ProgressCallback = Callable[[str, int, int, float | None], None]
Reporter = Callable[[int, float | None], None]

# Runs take minutes; the ranks that finish first wait at a barrier for the rest.
_DIST_TIMEOUT = datetime.timedelta(hours=24)


def join_world() -> World:
    """This process's place under ``torchrun`` (a world of one otherwise): a gloo group,
    whatever the device, since the ranks only meet at barriers between phases."""
    world, _ = init_world("cpu", timeout=_DIST_TIMEOUT)
    return world


@dataclass
class Runner:
    """Trains jobs that have no record yet, and keeps the names of those trained and reused."""

    context: Context
    workers: int
    world: World
    registry: Registry
    on_progress: ProgressCallback | None = None
    launcher: str = "local"  # "ray": each job a Ray task (zoo.ablate.cluster)
    trained: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    distrusted: list[str] = field(default_factory=list)  # the records found wrong, why, and that they trained again
    at_once: int | None = None  # runs that trained side by side in the last call that trained any (None: Ray's)

    def run(self, jobs: list[Job]) -> None:
        """Train the jobs without a record: here, in ``workers`` processes, or this rank's share."""
        todo = []
        for job in jobs:
            reason = distrust(job, self.context, self.registry)
            if reason is None:
                self.reused.append(job.key)
                continue
            todo.append(job)
            if reason:
                self.distrusted.append(
                    f"{printable(self.context.record_path(job).name)} was not reused: {reason}; its run "
                    f"({printable(job.label)}) trained again, and its row is that run's"
                )
        self.trained.extend(job.key for job in todo)
        rank, size = self.world.rank, self.world.size
        barrier(self.world)  # every rank has the same list before any writes a record
        mine = todo[rank::size]
        shown = self.on_progress if rank == 0 else None  # progress from rank 0 only
        devices = _devices(self.context.device, self.workers if size == 1 else 1, rank)
        if todo:
            self.at_once = _at_once(self.launcher, self.workers, size, len(todo))
        if self.launcher == "ray" and size == 1:
            done = (
                None
                if shown is None
                else (lambda job, loss: shown(job.label, job.settings.steps, job.settings.steps, loss))
            )
            run_on_ray(mine, self.context, ray_work, done)
        elif self.workers <= 1 or size > 1 or len(mine) <= 1:
            for job in mine:
                execute(job, self.context, devices[0], _reporter(shown, job), self.registry)
        else:
            _run_in_processes(mine, self.context, min(self.workers, len(mine)), devices, shown)
        barrier(self.world)
        if shown is not None and size > 1:  # the other ranks' runs, done now: their final losses
            for job in todo:
                if job not in mine:
                    steps = job.settings.steps
                    shown(job.label, steps, steps, read_record(job, self.context)["final_val_loss"])


def execute(job: Job, context: Context, device: str, report: Reporter | None, registry: Registry) -> None:
    """Train ``job`` and leave its record (and, for a compared run, its checkpoint)."""
    if device.startswith("cuda"):
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(job.settings.seed)
        model = build(job.config, registry=registry)
    model.to(device)
    steps = job.settings.steps
    if report is not None:
        report(0, None)
    data = context.token_data()
    if job.tune:  # trained without the training split's tail, scored on it: never on the validation windows
        head, tail = data.train.held_out(TUNE_HELD_OUT)
        data = replace(data, train=head, val=tail)
    probe = None if job.tune else Probe(model, data, job.settings)  # the sweep's short runs go unmeasured

    def on_step(step: int, loss: float | None) -> None:
        if probe is not None:
            probe.at(step)
        if report is not None:
            report(step, loss)

    loss: float | None
    try:
        if probe is not None:
            probe.at(0)
        trained = fit(model, data, None, job.settings, on_step=on_step)
    except DivergenceError as err:
        if not job.tune:
            raise DivergenceError(f"run {job.label!r}: {err}") from err
        loss, curve, speed, seconds = None, [], 0.0, 0.0  # a rate of the sweep that diverged
    except ConfigError as err:
        raise ConfigError(f"run {job.label!r}: {err}") from err
    else:
        loss, curve, speed, seconds = (
            trained.final_val_loss,
            trained.curve,
            trained.tokens_per_second,
            trained.train_seconds,
        )
        past = past_limit(loss, curve)
        if past is not None and not job.tune:
            raise DivergenceError(
                f"run {job.label!r}: {past}, past the {LOSS_LIMIT:g} nats/token a record holds: training diverged; "
                f"lower the learning rate (--lr, now {job.settings.lr:g}) or raise the warm-up (--warmup), or let "
                f"--tune-lr pick a rate per variant"
            )
        if past is not None:
            loss, curve, speed, seconds = None, [], 0.0, 0.0  # a rate of the sweep that diverged
    lengths = length_losses(model, data.val, job.settings, job.lengths) if job.lengths and loss is not None else None
    for length, at in (lengths or {}).items():
        if at is not None and not 0.0 <= at <= LOSS_LIMIT:  # NaN fails the test too
            raise DivergenceError(
                f"run {job.label!r}: its validation loss at {length} tokens (--eval-lengths) is {at:.4g}, past the "
                f"{LOSS_LIMIT:g} nats/token a record holds: the model's outputs there are not finite numbers"
            )
    body = record_body(job, context, loss, curve, speed, probe.taken if probe is not None else None, lengths, seconds)
    if not job.tune:
        about = {
            "run": job.label,
            "axis": job.axis,
            "seed": job.settings.seed,
            "lr": job.settings.lr,
            "steps": steps,
            "final_val_loss": loss,
            "data": context.data,
            "record_digest": body["digest"],  # binds the record to this checkpoint
        }
        save(model.to("cpu"), context.checkpoint(job), metadata={"ablation": about}, registry=registry)
    write_record(job, context, body)
    if report is not None:
        report(steps, loss)


def ray_work(job: Job, context: Context) -> None:
    """One job as a Ray task: its threads, the GPU Ray gave it (or the CPU), the installed plugins."""
    if context.threads is not None:
        torch.set_num_threads(context.threads)
    execute(job, context, "cuda:0" if context.device.startswith("cuda") else "cpu", None, default_registry())


def _reporter(on_progress: ProgressCallback | None, job: Job) -> Reporter | None:
    if on_progress is None:
        return None
    steps = job.settings.steps
    return lambda step, loss: on_progress(job.label, step, steps, loss)


def _at_once(launcher: str, workers: int, ranks: int, jobs: int) -> int | None:
    """How many runs train side by side: one per rank, ``workers`` processes, or Ray's call (None)."""
    if launcher == "ray" and ranks == 1:
        return None
    return min(ranks if ranks > 1 else max(1, workers), jobs)


def _devices(device: str, count: int, rank: int) -> list[str]:
    """One device per worker: the CPU, or the GPUs round robin (a rank: its local GPU)."""
    if device == "cpu":
        return ["cpu"] * max(1, count)
    gpus = torch.cuda.device_count()
    local = launcher_int("LOCAL_RANK", rank)
    return [f"cuda:{(local + i) % gpus}" for i in range(max(1, count))]


# -- worker processes --------------------------------------------------------------------

# The state of a worker process, set once by _start_worker.
_WORKER: dict[str, Any] = {}


def _start_worker(context: Context, progress: Any, devices: Any, parent: int) -> None:
    _WORKER.update(context=context, progress=progress, device=devices.get())
    if context.threads is not None:
        torch.set_num_threads(context.threads)
    # ``parent`` is the pid the ablation passed, not os.getppid(): it may have died already.
    watch = threading.Thread(target=_exit_with_parent, args=(parent,), name="zoo-parent-watch", daemon=True)
    watch.start()


def _exit_with_parent(parent: int, every: float = 0.5) -> None:
    """End this worker once the ablation that started it is gone (killed with SIGTERM or
    SIGKILL, which skip its clean-up): an orphan would train on, holding the cores, for
    nobody. Its record is written atomically, so a run cut short leaves nothing to reuse."""
    while os.getppid() == parent:
        time.sleep(every)
    os._exit(1)


def _work(job: Job) -> None:
    progress = _WORKER["progress"]

    def report(step: int, loss: float | None) -> None:
        if step < job.settings.steps or loss is None:  # the parent reports the end itself
            progress.put((job.label, step, job.settings.steps, loss))

    execute(job, _WORKER["context"], _WORKER["device"], report, default_registry())


def _run_in_processes(
    jobs: list[Job], context: Context, workers: int, devices: list[str], on_progress: ProgressCallback | None
) -> None:
    """Train ``jobs`` in ``workers`` fresh (spawned) processes; each writes its record."""
    mp = multiprocessing.get_context("spawn")
    progress, free = mp.Queue(), mp.Queue()
    for device in devices[:workers]:
        free.put(device)
    done_labels: set[str] = set()

    def drain() -> None:
        while True:
            try:
                label, step, total, loss = progress.get_nowait()
            except Empty:
                return
            if on_progress is not None and label not in done_labels:
                on_progress(label, step, total, loss)

    with ProcessPoolExecutor(
        workers, mp_context=mp, initializer=_start_worker, initargs=(context, progress, free, os.getpid())
    ) as pool:
        futures: dict[Future[None], Job] = {pool.submit(_work, job): job for job in jobs}
        pending = set(futures)
        try:
            while pending:
                done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                drain()
                for future in done:
                    job = futures[future]
                    try:
                        future.result()  # a run's error stops the ablation
                    except BrokenProcessPool as err:
                        raise ZooError(_died(job, context)) from err
                    done_labels.add(job.label)
                    if on_progress is not None:
                        steps = job.settings.steps
                        on_progress(job.label, steps, steps, read_record(job, context)["final_val_loss"])
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    drain()


def _died(job: Job, context: Context) -> str:
    return (
        f"the worker process training run {job.label!r} stopped without a word (killed, or out of memory?); "
        f"the runs that finished are kept in {printable(str(context.out_dir))}: run the same command again "
        f"(the same --out) to resume from them, with fewer --workers (or --workers 1) if memory ran out"
    )
