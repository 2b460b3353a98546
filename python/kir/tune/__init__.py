"""Tuning recorded launches (issue 13 §2): Optuna searches a record's launch
configuration and compile options by replaying variants (kir.replay), and the
winner the JIT client may use is handed to it through the kernel-object cache,
under the JIT key the client computes at the app's launch — one key space, no
translation (docs/tune.md)::

    from kir.tune import Space, tune
    results = tune(["rec/records/….kirrec"], Space.preset("standard"), trials=30, cache="jit-cache")
    for r in results:
        print(r.outcome.recorded_ms, r.outcome.best().ms, r.handoff.key, r.handoff.stored)

A different grid or block changes what the app's launch computes, so the JIT
client never applies one: the hand-off is the best verified trial at the recorded
launch whose code the client's key covers (`Client.accepts`); the best trial
overall is reported as a suggestion for the developer.
"""
from __future__ import annotations

import dataclasses

from kir.errors import OptionError
from kir.tune.results import write_results
from kir.tune.space import PRESETS, Point, Space
from kir.tune.study import Client, Handoff, Outcome, TrialRow, TuneTask, handoff, load_outcome, speedup, throughput

__all__ = ["PRESETS", "SCHEMA", "Client", "Handoff", "Outcome", "Point", "RecordTuning", "Space", "TrialRow",
           "TuneTask", "tune", "write_results"]

SCHEMA = "kir.tune/1"


@dataclasses.dataclass
class RecordTuning:
    """What `tune` returns for one record: the study's outcome and the hand-off to each
    JIT client."""
    outcome: Outcome
    handoffs: list[Handoff]   #: one per client (the first: `tune`'s first client)
    warnings: list[str] = dataclasses.field(default_factory=list)  #: e.g. a study not continued (choose_study)

    @property
    def handoff(self) -> Handoff:
        """The hand-off to the first client."""
        return self.handoffs[0]

    def to_json(self) -> dict:
        """One record's entry of `kir tune --json` (schema SCHEMA)."""
        o, best = self.outcome, self.outcome.best()
        return {"record": o.path, "kernel": o.record.kernel.name, "demangled": o.record.kernel.demangled,
                "static_hash": o.record.kernel.static_hash,
                "launch_identity": o.record.launch.launch_identity, "study": o.study, "arch": o.arch,
                "space": o.space, "recorded": o.recorded,
                "best": None if best is None else {"trial": best.number, "median_ms": best.ms,
                                                   "speedup": speedup(o.recorded_ms, best.ms),
                                                   "point": best.point.to_json(),
                                                   "description": best.point.describe(),
                                                   "recorded_launch": best.point.recorded_launch},
                "handoff": self.handoff.to_json() | {
                    "median_ms": self.handoff.row.ms if self.handoff.row else None,
                    "speedup": speedup(o.recorded_ms, self.handoff.row.ms) if self.handoff.row else None,
                    "description": self.handoff.row.point.describe() if self.handoff.row else None},
                "handoffs": [h.to_json() | {"median_ms": h.row.ms if h.row else None} for h in self.handoffs],
                "trials": [r.to_json() for r in o.rows], "throughput": throughput(o.rows),
                "warnings": list(self.warnings),
                "skipped": [r.to_json() for r in o.skipped],
                "skipped_counts": {k: sum(r.skipped == k for r in o.skipped) for k in ("banned", "invalid")},
                "banned_blocks": [list(b) for b in o.banned_blocks]}


def tune(paths, space: Space | None = None, trials: int = 20, *, storage: str | None = None, cluster=None,
         seed: int | None = None, executor: str | None = None, client: Client | list[Client] = Client(),  # noqa: B008 (frozen)
         cache=None, store: str = "better", device: int = 0, progress=None, resume: bool = False,
         sampler: str = "tpe", metric: str = "median", objective: str = "time", timeout: float | None = None,
         fail_fast: bool = False, study_prefix: str = "kir-tune", baseline_only: bool = False,
         trial_timeout: float | None = None, adaptive_invalid_ban: bool = True) -> list[RecordTuning]:
    """Tune every record of `paths` (`trials` trials each) and hand each winner to the
    JIT client's cache. `cluster`: a kir.distribute.Cluster to run on (each record's
    trials split over its workers when they share `storage`); `storage`: an Optuna
    storage URL or "journal:PATH" (kir.tune.study.open_storage; None: in memory,
    one task per record); `executor`: "MODULE:FUNCTION" instead of GPU replays;
    `progress(done, total)`: called as trials end (on a cluster: as tasks end);
    `client`: the JIT client, or a list of them: the winner is stored under each one's
    key (kir.jit.clients: the clients declared in the cache directory); records that
    share a key keep the fastest (`handoff`). A study in `storage` run with another space or
    executor is not continued (a new one starts, said in the result's warnings) unless `resume`.

    `sampler`, `metric`, `objective`, `timeout`, `fail_fast`, `study_prefix`:
    kir.tune.study.TuneTask's; `trial_timeout`: seconds a trial may take;
    `baseline_only`: measure the recorded code, no trial; `adaptive_invalid_ban`: a block
    whose launch failed is skipped in later samples (kir.tune.study.banned_blocks)."""
    from kir.tune.study import METRICS, OBJECTIVES, SAMPLERS
    for name, value, allowed in (("--sampler", sampler, SAMPLERS), ("--metric", metric, tuple(METRICS)),
                                 ("--objective", objective, OBJECTIVES)):
        if value not in allowed:
            raise OptionError(f"{name} {value!r}: expected {', '.join(allowed)}")
    for name, value in (("--timeout", timeout), ("--trial-timeout", trial_timeout)):
        if value is not None and not value > 0:
            raise OptionError(f"{name} {value!r}: expected a positive number of seconds")
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise OptionError(f"--trials {trials!r}: expected a positive number")
    if store not in ("better", "always", "never"):
        raise OptionError(f"--store {store!r}: expected better, always or never")
    paths = [str(p) for p in paths]
    if not paths:
        raise OptionError("no records to tune")
    space = space or Space.preset("standard")
    space_data = _space_dict(space)
    workers = cluster.workers if cluster is not None else 1
    per_record = max(1, workers // len(paths)) if storage is not None else 1
    from kir.record import Record
    from kir.tune.study import choose_study, settings_digest
    digest = settings_digest(space_data, executor, metric=metric, objective=objective)
    tasks, studies = [], {}
    for path in paths:
        studies[path] = choose_study(Record.load(path), storage, digest, resume, study_prefix)
        share = min(per_record, trials)
        for i in range(share):
            n = trials // share + (1 if i < trials % share else 0)
            tasks.append(TuneTask(path, space_data, 0 if baseline_only else n, storage,
                                  None if seed is None else seed + i, executor, device, study=studies[path][0],
                                  sampler=sampler, metric=metric, objective=objective, timeout=timeout,
                                  fail_fast=fail_fast, study_prefix=study_prefix, trial_timeout=trial_timeout,
                                  adaptive_invalid_ban=adaptive_invalid_ban))
    if cluster is not None:
        from kir.distribute import Failure, map_items
        finished = [0]

        def arrived(i: int, _result) -> None:
            finished[0] += tasks[i].trials
            progress(finished[0], len(paths) * trials)
        returned = map_items(cluster, _run_task, tasks, on_result=arrived if progress is not None else None)
        failures = [(t, r) for t, r in zip(tasks, returned) if isinstance(r, Failure)]
        if failures and storage is None:
            task, failure = failures[0]
            raise OptionError(f"{task.path}: tuning failed on its worker: {failure.message}")
    else:
        ended = [0]

        def trial_ended() -> None:
            ended[0] += 1
            progress(ended[0], len(paths) * trials)
        returned = [task(on_trial=trial_ended if progress is not None else None) for task in tasks]
    clients = [client] if isinstance(client, Client) else list(client)
    if not clients:
        raise OptionError("no JIT client to hand off to")
    results, claimed = [], {}
    for path in paths:
        name, warning = studies[path]
        outcome = load_outcome(path, storage, [r for r in returned if isinstance(r, dict)], name, study_prefix)
        results.append(RecordTuning(outcome, [handoff(outcome, c, cache, store, claimed) for c in clients],
                                    ([warning] if warning else []) + outcome.warnings))
    return results


def _run_task(task: TuneTask) -> dict:
    return task()


def _space_dict(space: Space) -> dict:
    """The space as Space.from_dict reads it (what travels to the workers): its fields
    but `source`, blocks as lists."""
    data = {k: v for k, v in dataclasses.asdict(space).items() if k != "source"}
    if not isinstance(space.block, str):
        data["block"] = [list(b) for b in space.block]
    return data
