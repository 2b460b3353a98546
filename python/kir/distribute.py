"""Mapping a function over many items (records) on a Dask cluster (dask.distributed)::

    from kir.distribute import Cluster, map_items
    with Cluster(workers=None) as cluster:            # one worker process per GPU
        results = map_items(cluster, replay_one, paths)

`Cluster` is where the work runs:

- `Cluster(workers=N)` starts a cluster on this machine, one worker *process* per
  worker (a single thread each, so each worker holds one CUDA context at a time):
  with GPUs, one worker per GPU by default, each started with `CUDA_VISIBLE_DEVICES`
  listing its own GPU first (so it replays on device 0) — dask-cuda's
  `LocalCUDACluster` when dask-cuda is installed and N is at most the GPU count,
  else a `distributed.SpecCluster` of nannies that does the same (N larger than the
  GPU count puts several workers on a GPU, in turn); without GPUs, a
  `distributed.LocalCluster` of N worker processes (default: one per CPU core).
- `Cluster(scheduler="tcp://host:8786")` or `Cluster(scheduler_file="sched.json")`
  joins a running cluster (started by `dask scheduler`/`dask worker`, dask-jobqueue
  on Slurm or PBS, or dask-mpi under an MPI launcher): its workers need kir installed
  and the items' files under the same paths (a shared file system).

`map_items(cluster, function, items)` returns `function(item)` for every item, in
the items' order. An item whose function raises gives `Failure(message)` in its
place; an item whose worker process dies while running it (a segfault, `os._exit`,
the kernel taking the driver down) is submitted once more, and if it kills a worker
again gives `Failure("the worker process ... died ...")` — never a hang, and the
other items still run: on the clusters started here a worker's death fails its task
at once (the scheduler's `allowed_failures` is 0, not Dask's default 3) and the
nanny starts a new worker process; items that were only queued on the dead worker
are simply submitted again.

A worker that survives but must not run anything more in its process — after a
sticky CUDA fault its device context is dead, and every later launch there fails
(`kir replay --all --workers`: a row with `device_fault`) — is restarted: with
`restart_if(result)` true, map_items asks the worker's nanny for a fresh process
(`Client.restart_workers`) before it submits more items, and says so through
`on_restart(index, address, problem)`; items after it run in a new process.

Dask is imported only by these functions, never by `import kir` or `kir replay`
without `--workers`/`--scheduler`.
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from kir.errors import DistributedError, OptionError, missing_extra

__all__ = ["Cluster", "DistributedError", "Failure", "gpu_count", "load_function", "map_items", "visible_devices"]


@dataclass(frozen=True)
class Failure:
    """In place of an item's result: the function raised, or its worker died twice."""
    message: str
    worker_died: bool = False


def load_function(spec: str, option: str = "--executor"):
    """FUNCTION of MODULE, from 'MODULE:FUNCTION' (an executor standing in for the
    GPU work: `kir replay --all --executor`, `kir tune --executor`)."""
    import importlib
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise OptionError(f"{option} {spec!r}: expected MODULE:FUNCTION")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise OptionError(f"{option} {spec}: cannot import {module_name}: {error}") from None
    function = getattr(module, name, None)
    if not callable(function):
        raise OptionError(f"{option} {spec}: {module_name} has no function {name}")
    return function


def visible_devices() -> list[str] | None:
    """The GPUs this process may use as `CUDA_VISIBLE_DEVICES` names them (indices or
    UUIDs); None when the variable is unset (then every GPU the driver sees)."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    return [d.strip() for d in value.split(",") if d.strip()]


def gpu_count() -> int:
    """How many GPUs this machine's CUDA driver shows this process (0 without a
    driver, cuda-bindings or GPU). Asks the driver in a child process, so that this
    process does not initialize CUDA before starting its workers."""
    devices = visible_devices()
    if devices is not None and not devices:
        return 0
    import subprocess
    import sys
    probe = ("from cuda.bindings import driver as d\n"
             "e, = d.cuInit(0)\n"
             "print(d.cuDeviceGetCount()[1] if e == d.CUresult.CUDA_SUCCESS else 0)\n")
    try:
        proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
        return int(proc.stdout.strip()) if proc.returncode == 0 else 0
    except (OSError, ValueError, subprocess.SubprocessError):
        return 0


def _device_lists(workers: int, devices: Sequence[str]) -> list[str]:
    """CUDA_VISIBLE_DEVICES for each worker: worker i sees GPU i (mod the count)
    first, then the others in order (as dask-cuda orders them)."""
    n = len(devices)
    return [",".join(devices[(i + k) % n] for k in range(n)) for i in range(workers)]


def _import_distributed():
    try:
        import distributed
    except ImportError as error:
        raise missing_extra("Dask (distributed)", "distributed", "--workers and --scheduler", error,
                            DistributedError) from None
    return distributed


class Cluster:
    """A Dask client and, unless it joined a running cluster, the local cluster it
    started (closed with the Cluster). `kind` says which: "LocalCUDACluster",
    "SpecCluster" (GPU workers without dask-cuda), "LocalCluster" or "scheduler"."""

    def __init__(self, workers: int | None = None, scheduler: str | None = None,
                 scheduler_file: str | None = None, gpus: int | None = None, quiet: bool = True) -> None:
        """`workers`: local worker processes (None: one per GPU, or per CPU core
        without GPUs); `scheduler`/`scheduler_file`: join that cluster instead;
        `gpus`: how many GPUs to spread local workers over (None: ask the driver);
        `quiet`: Dask logs only critical messages (a worker's death is reported
        in its item's place)."""
        if workers is not None and workers < 1:
            raise OptionError(f"--workers {workers}: must be at least 1")
        if scheduler and scheduler_file:
            raise OptionError("--scheduler and --scheduler-file: give one")
        if (scheduler or scheduler_file) and workers is not None:
            raise OptionError("--workers starts a cluster here; --scheduler joins one: give one")
        if scheduler_file and os.path.lexists(scheduler_file):  # else Dask waits for the scheduler to write it
            from kir.files import load_json
            load_json(scheduler_file, f"--scheduler-file {scheduler_file}")  # Dask's open would block on a FIFO
        distributed = _import_distributed()
        if quiet:
            import logging
            logging.getLogger("distributed").setLevel(logging.CRITICAL)
        self.cluster = None
        try:
            if scheduler or scheduler_file:
                self.kind = "scheduler"
                self.client = distributed.Client(scheduler, scheduler_file=scheduler_file)
            else:
                self.cluster, self.kind = self._start(distributed, workers, gpu_count() if gpus is None else gpus,
                                                   quiet)
                self.client = distributed.Client(self.cluster)
        except (OSError, TimeoutError, ValueError) as error:
            self.close()
            where = scheduler or scheduler_file or "a local cluster"
            raise DistributedError(f"Dask: cannot {'reach' if where != 'a local cluster' else 'start'} "
                                   f"{where}: {error}") from None
        self.address = self.client.scheduler.address

    @staticmethod
    def _start(distributed, workers: int | None, gpus: int, quiet: bool):
        import logging
        silence = logging.CRITICAL if quiet else False
        common = dict(threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None,
                      memory_limit=0, silence_logs=silence, scheduler_kwargs={"allowed_failures": 0})
        if gpus <= 0:
            return distributed.LocalCluster(n_workers=workers or os.cpu_count() or 1, **common), "LocalCluster"
        n = workers or gpus
        if n <= gpus:
            try:
                from dask_cuda import LocalCUDACluster
            except ImportError:
                LocalCUDACluster = None
            if LocalCUDACluster is not None:
                devices = visible_devices() or [str(i) for i in range(gpus)]
                return LocalCUDACluster(n_workers=n, CUDA_VISIBLE_DEVICES=",".join(devices[:gpus]),
                                        **common), "LocalCUDACluster"
        devices = visible_devices() or [str(i) for i in range(gpus)]
        return _gpu_spec_cluster(distributed, n, devices, silence), "SpecCluster"

    @property
    def workers(self) -> int:
        """Workers the scheduler knows now."""
        return len(self.client.scheduler_info(n_workers=-1)["workers"])

    def close(self) -> None:
        for thing in (getattr(self, "client", None), self.cluster):
            if thing is not None:
                try:
                    thing.close()
                except Exception:  # closing after a failure: keep going
                    pass

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _gpu_spec_cluster(distributed, workers: int, devices: Sequence[str], silence):
    """Local worker processes (nannies), worker i started with CUDA_VISIBLE_DEVICES
    naming device i (mod the count) first."""
    from distributed.deploy.spec import SpecCluster
    spec = {f"gpu-{i}": {"cls": distributed.Nanny,
                         "options": {"nthreads": 1, "memory_limit": 0, "host": "127.0.0.1", "name": f"gpu-{i}",
                                     "silence_logs": silence, "env": {"CUDA_VISIBLE_DEVICES": visible}}}
            for i, visible in enumerate(_device_lists(workers, devices))}
    scheduler = {"cls": distributed.Scheduler,
                 "options": {"host": "127.0.0.1", "dashboard_address": None, "allowed_failures": 0}}
    return SpecCluster(workers=spec, scheduler=scheduler, name="kir")


def map_items(cluster: Cluster, function: Callable, items: Iterable, *,
              on_result: Callable | None = None, attempts: int = 2, restart_if: Callable | None = None,
              on_restart: Callable | None = None) -> list:
    """`function(item)` for every item on the cluster's workers, in the items' order;
    `Failure` where it raised, or where its worker died `attempts` times (see the
    module's docstring). `function` and the items must pickle (a function defined at
    the top level of an importable module, or a functools.partial of one).
    `on_result(index, result)` is called as each result arrives. With
    `restart_if(result)` true, the worker that returned it is restarted first (a
    fresh process) and `on_restart(index, address, problem)` is called: `problem`
    None when the worker is back, else why it could not be restarted.

    At most as many items are in flight as the cluster has worker threads (asked
    again as results come, so workers that join later are used): each worker runs
    one item at a time and holds no queue, so a worker that dies takes no other
    item down with it."""
    from distributed import as_completed
    from distributed.scheduler import KilledWorker

    items = list(items)
    results: list = [None] * len(items)
    tries = [0] * len(items)
    waiting = list(range(len(items)))[::-1]  # popped from the end: first item first
    running: dict = {}
    pending = as_completed()

    def fill() -> None:
        window = max(1, sum(cluster.client.nthreads().values()))
        while waiting and len(running) < window:
            i = waiting.pop()
            future = cluster.client.submit(function, items[i], pure=False, key=f"kir-item-{i}-{tries[i]}")
            running[future] = i
            pending.add(future)

    fill()
    for future in pending:
        i = running.pop(future)
        tries[i] += 1
        if future.status == "finished":
            result = future.result()
            if restart_if is not None and restart_if(result):
                address, problem = _restart_worker(cluster, future)
                if on_restart is not None:
                    on_restart(i, address, problem)
        else:
            try:
                error = future.exception()
            except BaseException as cancelled:  # cancelled: the scheduler or the client lost it
                error = cancelled
            if isinstance(error, KilledWorker) and tries[i] < attempts:
                waiting.append(i)  # next: on a fresh worker
                future.release()
                fill()
                continue
            if isinstance(error, KilledWorker):
                worker = getattr(getattr(error, "last_worker", None), "address", "a worker")
                result = Failure(f"the worker process running it died, {tries[i]} times (last: {worker})",
                                 worker_died=True)
            else:
                result = Failure(f"{type(error).__name__}: {error}")
        future.release()
        results[i] = result
        if on_result is not None:
            on_result(i, result)
        fill()
    return results


def _restart_worker(cluster: Cluster, future) -> tuple[str | None, str | None]:
    """Restart the worker holding `future`'s result (its nanny starts a fresh
    process); (its address, None) when it is back, else (address, why not). The
    result (already here) is released and forgotten by the scheduler first: a
    result lost with its worker while still wanted is computed again, which would
    run the faulting item once more, in the fresh process."""
    import time
    held = cluster.client.who_has(future).get(future.key) or ()
    if not held:
        return None, "the worker holding the result is not known to the scheduler"
    address, key = held[0], future.key
    future.release()
    deadline = time.monotonic() + 30
    while cluster.client.run_on_scheduler(_knows_task, key) and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        status = cluster.client.restart_workers([address], raise_for_error=False).get(address)
    except Exception as error:  # a worker without a nanny, a scheduler that refuses
        return address, f"{type(error).__name__}: {error}"
    return address, None if status == "OK" else f"restart_workers: {status}"


def _knows_task(key, dask_scheduler=None) -> bool:
    """On the scheduler: whether it still holds task `key`."""
    return key in dask_scheduler.tasks
