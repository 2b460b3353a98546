"""The search (Optuna) and the hand-off to the JIT client (issue 13 §2).

One Optuna study per record, minimizing the replay time (the median of the
trial's timed launches) of verified variants: a trial whose output differs from
the recording, or that fails to compile, load or launch, is *pruned* — kept in the
table with its reason, never a candidate, and left out of the sampler's model.
The first trial is the recorded launch with kir.jit's default options (what the
JIT client would run untuned); the recorded code itself is measured apart, as
the baseline every trial is compared with. A point already measured in this
process is not run again (the sampler may propose it twice).

`TuneTask` runs `trials` trials of one record's study and is picklable: with a
Dask cluster (kir.distribute) several tasks of one study run on several workers at
once, sharing their trials through the study's storage (an Optuna journal file on
a shared file system, or any Optuna storage URL), as Optuna's distributed
optimization works; the process that asked reads the study back from the storage
for the report and the hand-off, and needs no GPU for either.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import socket
import statistics
import time
from pathlib import Path

from kir.errors import OptionError, missing_extra
from kir.tune.space import Point, Space

__all__ = ["Client", "Outcome", "TrialRow", "TuneTask", "choose_study", "handoff", "load_outcome", "open_storage",
           "phases", "settings_digest", "study_name", "throughput"]


def _optuna():
    try:
        import optuna
    except ImportError as error:
        raise missing_extra("optuna", "tune", "kir tune", error) from None
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # a failed trial raises, and kir says why itself
    return optuna


def study_name(record, prefix: str = "kir-tune") -> str:
    """The study of a recorded launch: <prefix>-<static hash>-<launch identity>
    (prefix: `kir tune --study-name`, default kir-tune)."""
    identity = record.launch.identity or "0"
    return f"{prefix}-{record.kernel.static_hash}-{identity}"


SAMPLERS = ("tpe", "random", "grid", "exhaustive", "cmaes")
METRICS = {"median": statistics.median, "mean": statistics.fmean, "min": min, "max": max}
OBJECTIVES = ("time", "speedup")


def make_sampler(optuna, name: str, space: Space, record, trials: int, seed: int | None):
    """Optuna's sampler for `kir tune --sampler` (Mneme's tuning/sample_strategy.py:
    random, TPE (Optuna), exhaustive; grid is Optuna's GridSampler over every
    choice; cmaes Optuna's CmaEsSampler, through the `cmaes` package, on the
    dimensions `Space.sample(ordinal=True)` encodes as integers)."""
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(10, max(1, trials // 3)))
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name in ("grid", "exhaustive"):
        return optuna.samplers.GridSampler(space.grid(record) or {"_": ["-"]}, seed=seed)
    if name == "cmaes":
        try:
            import cmaes  # noqa: F401 (Optuna's CmaEsSampler imports it at the first trial)
        except ImportError as error:
            raise missing_extra("cmaes", "tune", "kir tune --sampler cmaes", error) from None
        return optuna.samplers.CmaEsSampler(seed=seed, n_startup_trials=min(5, max(1, trials // 4)),
                                            independent_sampler=optuna.samplers.RandomSampler(seed=seed),
                                            warn_independent_sampling=False)
    raise OptionError(f"--sampler {name!r}: expected {', '.join(SAMPLERS)}")


def objective_value(result: dict, metric: str) -> float | None:
    """The statistic `metric` of a trial's timed launches (times_ms; median_ms when
    there are none)."""
    times = [t for t in result.get("times_ms") or [] if t is not None]
    if not times:
        return result.get("median_ms")
    return float(METRICS[metric](times))


def settings_digest(space: dict, executor: str | None = None, **options) -> str:
    """What a study's trials depend on besides the record (the space, the executor, and
    `options` such as the metric and objective its values are), as 16 hex digits: kept in the
    study ("settings") so that a run with others does not continue it."""
    import hashlib
    text = json.dumps({"space": space, "executor": executor, **options}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def choose_study(record, storage: str | None, digest: str, resume: bool = False,
                 prefix: str = "kir-tune") -> tuple[str, str | None]:
    """The study this run continues or starts, and a warning (None: nothing to say). A study of
    the record in `storage` that was run with other settings is not continued: a new study
    kir-tune-…-DIGEST8 is started, unless `resume` (then it continues, said). Mneme compares an
    earlier session's space and options too (TuningSession._validate_resume,
    python/mneme/tuning/session.py), and refuses a mismatch under --resume."""
    name = study_name(record, prefix)
    if storage is None:
        return name, None
    optuna = _optuna()
    try:
        earlier = optuna.load_study(study_name=name, storage=open_storage(storage))
    except KeyError:
        return name, None
    stored = earlier.user_attrs.get("settings")
    if stored is None or stored == digest:
        return name, None
    if resume:
        return name, (f"study {name} in {storage} was run with another space or options; continued as asked "
                      "(--resume)")
    new = f"{name}-{digest[:8]}"
    try:
        optuna.load_study(study_name=new, storage=open_storage(storage))
        return new, None  # started by an earlier run with these settings: continued
    except KeyError:
        return new, (f"study {name} in {storage} was run with another space or options: starting study {new} "
                     "(--resume continues the earlier one)")


def check_storage(url: str | None) -> None:
    """OptionError unless a "journal:PATH" storage names a file name and, when PATH
    exists, a regular file (Optuna would block on a FIFO, or read a device without end)."""
    if url is None or not url.startswith("journal:"):
        return
    path = url[len("journal:"):]
    if not path:
        raise OptionError("--storage journal:PATH: a file name is needed")
    if os.path.lexists(path):
        from kir.files import open_regular
        os.close(open_regular(path, f"--storage {url}", OptionError)[0])


def open_storage(url: str | None):
    """An Optuna storage: None (in memory, this process only), "journal:PATH" (an
    Optuna journal file: many processes and nodes on a shared file system), or any
    URL Optuna takes (sqlite:///file.db, postgresql://..., redis via journal)."""
    optuna = _optuna()
    if url is None:
        return optuna.storages.InMemoryStorage()
    if url.startswith("journal:"):
        path = url[len("journal:"):]
        check_storage(url)
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock
        return optuna.storages.JournalStorage(JournalFileBackend(path, lock_obj=JournalFileOpenLock(path)))
    return url


@dataclasses.dataclass(frozen=True)
class TuneTask:
    """`trials` trials of `path`'s study (see the module's docstring). `executor`:
    "MODULE:FUNCTION" run as FUNCTION(path, point) -> result dict (the point a
    Point.to_json(), or Space.recorded() for the recorded code) instead
    of a replay on the GPU (tests); `storage`: open_storage's URL (None: in memory:
    then the task returns its trials, as the only place they live)."""
    path: str
    space: dict
    trials: int
    storage: str | None = None
    seed: int | None = None
    executor: str | None = None
    device: int = 0
    measure_baseline: bool = True
    study: str | None = None       #: the study's name (choose_study; None: study_name(record, study_prefix))
    sampler: str = "tpe"               #: SAMPLERS
    metric: str = "median"             #: METRICS: the statistic of the timed launches minimized
    objective: str = "time"            #: "time" (minimized) or "speedup" (the recorded code's over it, maximized)
    timeout: float | None = None       #: no new trial after this many seconds
    fail_fast: bool = False            #: stop at the first trial whose status is "error"
    study_prefix: str = "kir-tune"
    trial_timeout: float | None = None  #: seconds a trial may take (TrialProcess kills it past them)
    adaptive_invalid_ban: bool = True  #: skip the blocks whose launch failed in an earlier trial (banned_blocks)

    def __call__(self, _item=None, on_trial=None) -> dict:
        optuna = _optuna()
        from kir.record import Record
        record = Record.load(self.path)
        space = Space.from_dict(self.space, "space").for_device(record)
        launch_only = record.kernel.ir is None  # an nvcc build: the launch configuration only (launch_only)
        if launch_only:
            space = space.launch_only()
        storage = open_storage(self.storage)
        name = self.study or study_name(record, self.study_prefix)
        sampler = make_sampler(optuna, self.sampler, space, record, self.trials, self.seed)
        ordinal = self.sampler == "cmaes"
        direction = "maximize" if self.objective == "speedup" else "minimize"
        study = optuna.create_study(study_name=name, storage=storage, direction=direction, sampler=sampler,
                                    load_if_exists=True)
        if "record" not in study.user_attrs:
            study.set_user_attr("record", str(self.path))
            study.set_user_attr("space", space.describe(record))
        if "settings" not in study.user_attrs:
            study.set_user_attr("settings", settings_digest(self.space, self.executor, metric=self.metric,
                                                            objective=self.objective))
        if not any(t.user_attrs.get("first") for t in study.get_trials(deepcopy=False)):
            if self.trials > 0:
                study.enqueue_trial(space.baseline_params(record, ordinal), user_attrs={"first": True},
                                    skip_if_exists=True)
        run, close = self._runner()
        baseline = {}
        try:
            if self.measure_baseline or self.objective == "speedup":
                baseline = run(self.path, space.recorded())
                baseline["value_ms"] = objective_value(baseline, self.metric)
                worker = f"{socket.gethostname()}:{os.getpid()}"
                study.set_user_attr(f"recorded:{worker}", baseline)
            seen: dict[str, dict] = {}  # a point measured in this task: not run again

            def objective(trial):
                point = space.sample(trial, record, ordinal)
                point.recorded_code = launch_only
                data = point.to_json()
                text = json.dumps(data, sort_keys=True)
                trial.set_user_attr("point", data)
                skip = self._skip(space, record, point, trial.study)
                if skip is not None:  # not run, not counted (Mneme: told to Optuna as invalid, no trial)
                    trial.set_user_attr("skipped", skip[0])
                    trial.set_user_attr("result", {"status": skip[0], "error": skip[1], "error_kind": skip[0]})
                    raise optuna.TrialPruned(skip[1])
                start = time.perf_counter()
                if text in seen:
                    result = dict(seen[text], repeated=True)
                else:
                    result = seen[text] = run(self.path, data)
                trial.set_user_attr("result", result)
                trial.set_user_attr("seconds", time.perf_counter() - start)
                trial.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")
                if self.fail_fast and result.get("status") == "error":
                    trial.study.stop()
                value = objective_value(result, self.metric)
                if result.get("status") != "ok" or value is None:
                    raise optuna.TrialPruned(result.get("error") or result.get("status"))
                trial.set_user_attr("value_ms", value)
                if self.objective == "speedup":
                    base = objective_value(baseline, self.metric) if baseline.get("status") == "ok" else None
                    if not base or value <= 0:
                        raise optuna.TrialPruned("no speed-up: the recorded code was not measured")
                    return base / value
                return value

            n = self.trials
            if self.sampler == "exhaustive" and n > 0:  # the whole grid (GridSampler stops the study there) and the first
                n = math.prod(len(v) for v in space.grid(record).values()) + 1
            counted = {"run": 0, "skipped": 0}
            limit = max(100, 10 * n)  # skipped samples in a row before the study is stopped

            def counter(study, trial):
                # a skipped sample (banned block, invalid point) is no trial: n trials are run
                # (Mneme's TuningSession._iter_optuna_candidates counts only those it submits)
                if trial.user_attrs.get("skipped"):
                    counted["skipped"] += 1
                    if counted["skipped"] >= limit:
                        study.set_user_attr(f"warning:{socket.gethostname()}:{os.getpid()}",
                                            f"stopped after {limit} samples in a row that were skipped (banned "
                                            f"blocks or invalid points): {counted['run']} of {n} trials run")
                        study.stop()
                    return
                counted["run"] += 1
                counted["skipped"] = 0
                if on_trial is not None:
                    on_trial()
                if counted["run"] >= n:
                    study.stop()
            try:
                if n > 0:
                    study.optimize(objective, n_trials=None, timeout=self.timeout, catch=(), callbacks=[counter])
            except ValueError as error:  # Optuna: a dimension's choices differ from the study's (--resume)
                raise OptionError(f"study {name}: cannot continue with this space: {error} (without --resume a "
                                  "new study starts)") from None
        finally:
            close()
        return {"study": name, "trials": _rows_json(study) if self.storage is None else None,
                "user_attrs": dict(study.user_attrs) if self.storage is None else None}

    def _skip(self, space: Space, record, point: Point, study) -> tuple[str, str] | None:
        """("invalid", why): the point cannot run (Space.invalid: checked before anything is
        compiled); ("banned", why): its block failed to launch in an earlier trial of the
        study (--adaptive-invalid-ban, Mneme's TuningSession._banned_block_shapes); None: run it."""
        why = space.invalid(point, record)
        if why is not None:
            return "invalid", why
        if self.adaptive_invalid_ban and not point.recorded_launch:
            failed = banned_blocks(study)
            if tuple(point.block) in failed:
                return "banned", (f"block {'x'.join(map(str, point.block))} failed to launch in trial "
                                  f"{failed[tuple(point.block)]} (--adaptive-invalid-ban)")
        return None

    def _runner(self):
        if self.executor:
            from kir.distribute import load_function
            return load_function(self.executor, "--executor"), lambda: None
        from kir.tune.trial import TrialProcess
        process = TrialProcess(self.device, self.trial_timeout)
        return process.run, process.close


#: the error kinds that ban a trial's block for later samples (--adaptive-invalid-ban):
#: its launch failed (refused by the driver, or faulted: a block the kernel does not guard)
BANNING_ERRORS = ("launch",)


def banned_blocks(study) -> dict[tuple[int, int, int], int]:
    """The blocks whose launch failed in a trial of `study` (error_kind in BANNING_ERRORS),
    each with the first such trial's number; never the recorded block (the app launched it:
    a failure there is the code's). Mneme bans a block shape after an "invalid_launch"
    result (python/mneme/tuning/session.py, TuningSession.run) and samples around it; read
    from the study, the ban holds for every worker that shares it."""
    optuna = _optuna()
    out = {}
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.PRUNED,)):
        point, result = t.user_attrs.get("point"), t.user_attrs.get("result") or {}
        if point and result.get("error_kind") in BANNING_ERRORS and not point.get("recorded_launch"):
            out.setdefault(tuple(point["block"]), t.number)
    return out


@dataclasses.dataclass
class TrialRow:
    """One trial of a record's study: the point it tried, what the replay returned, its time."""
    number: int
    state: str              #: "complete", "pruned" (failed or mismatched: `result.status`), "running", "fail"
    point: Point | None
    result: dict
    seconds: float | None = None    #: the trial's run: sending it to the replay process until its result came back
    worker: str | None = None

    value_ms: float | None = None   #: the objective's statistic of the timed launches (--metric)
    started: str | None = None      #: Optuna's datetime_start, ISO 8601 (the trial asked for; local time)
    completed: str | None = None    #: Optuna's datetime_complete (told its value, or pruned)
    phases: dict | None = None      #: phases(): the trial's wall seconds split (None: not finished)
    skipped: str | None = None      #: "banned" or "invalid": a sample not run (TuneTask._skip), no trial

    @property
    def ms(self) -> float | None:
        """The trial's time by the study's metric; None unless it completed."""
        if self.state != "complete":
            return None
        return self.value_ms if self.value_ms is not None else self.result.get("median_ms")

    def to_json(self) -> dict:
        return {"number": self.number, "state": self.state, "point": self.point.to_json() if self.point else None,
                "description": self.point.describe() if self.point else None, "result": self.result,
                "seconds": self.seconds, "worker": self.worker, "value_ms": self.value_ms, "started": self.started,
                "completed": self.completed, "phases": self.phases,
                "skipped": self.skipped}

    @classmethod
    def from_json(cls, d: dict) -> TrialRow:
        return cls(d["number"], d["state"], Point.from_json(d["point"]) if d["point"] else None, d["result"] or {},
                   d["seconds"], d["worker"], d.get("value_ms"), d.get("started"), d.get("completed"),
                   d.get("phases"), d.get("skipped"))


def phases(wall: float | None, seconds: float | None, result: dict) -> dict | None:
    """A finished trial's wall seconds (Optuna's start to completion) split into
    `compile_s` (kir.jit: result.compile_seconds), `run_s` (the rest of the replay
    process's time for it, result.replay_seconds: opening the record, loading, the
    warm-up and timed launches, verifying; from an --executor without replay_seconds,
    its call's) and `overhead_s`, the rest: Optuna's sampling and storage, sending
    the trial to the replay process and its result back, starting that process
    again after a device fault. A point measured before in this task (`repeated`)
    is all overhead."""
    if wall is None:
        return None
    compile_s = run_s = 0.0
    if not result.get("repeated"):
        compile_s = float(result.get("compile_seconds") or 0.0)
        process = result.get("replay_seconds")
        process = seconds if process is None else process
        run_s = max(0.0, float(process or 0.0) - compile_s)
    return {"wall_s": wall, "compile_s": compile_s, "run_s": run_s,
            "overhead_s": max(0.0, wall - compile_s - run_s)}


def throughput(rows: list[TrialRow]) -> dict:
    """Trials per minute over the finished trials of `rows` (from the first one's
    start to the last one's completion: the baseline measured before them is left
    out; trials of several workers overlap) and the mean of each phase per trial."""
    import datetime
    done = [r for r in rows if r.phases is not None and r.started and r.completed]
    out = {"trials": len(done), "span_s": None, "trials_per_minute": None, "mean_wall_s": None,
           "mean_compile_s": None, "mean_run_s": None, "mean_overhead_s": None}
    if not done:
        return out
    first = min(datetime.datetime.fromisoformat(r.started) for r in done)
    last = max(datetime.datetime.fromisoformat(r.completed) for r in done)
    span = (last - first).total_seconds()
    out["span_s"] = span
    out["trials_per_minute"] = 60.0 * len(done) / span if span > 0 else None
    for key in ("wall", "compile", "run", "overhead"):
        out[f"mean_{key}_s"] = statistics.fmean(r.phases[f"{key}_s"] for r in done)
    return out


def _rows_json(study) -> list[dict]:
    return [_row(t).to_json() for t in study.get_trials(deepcopy=False)]


def _row(t) -> TrialRow:
    state = t.state.name.lower()
    point = Point.from_json(t.user_attrs["point"]) if "point" in t.user_attrs else None
    result = t.user_attrs.get("result") or {}
    seconds = t.user_attrs.get("seconds")
    start, end = t.datetime_start, t.datetime_complete
    wall = (end - start).total_seconds() if start is not None and end is not None else None
    return TrialRow(t.number, state, point, result, seconds, t.user_attrs.get("worker"), t.user_attrs.get("value_ms"),
                    start.isoformat() if start is not None else None, end.isoformat() if end is not None else None,
                    phases(wall, seconds, result), t.user_attrs.get("skipped"))


@dataclasses.dataclass
class Outcome:
    """A record's study, read back: its trials, the baseline, the winners."""
    path: str
    record: object
    study: str
    rows: list[TrialRow]
    recorded: dict            #: the recorded code's result (median over the workers that measured it)
    space: dict
    skipped: list[TrialRow] = dataclasses.field(default_factory=list)  #: samples not run (TrialRow.skipped)
    warnings: list[str] = dataclasses.field(default_factory=list)      #: from the tasks (a study stopped early)

    @property
    def banned_blocks(self) -> list[tuple[int, int, int]]:
        """The blocks banned (--adaptive-invalid-ban): failed to launch in a trial."""
        return sorted({tuple(r.point.block) for r in self.rows if r.point is not None and not r.point.recorded_launch
                       and r.result.get("error_kind") in BANNING_ERRORS})

    @property
    def recorded_ms(self) -> float | None:
        """The recorded code's time, by the study's --metric (value_ms)."""
        value = self.recorded.get("value_ms")
        return value if value is not None else self.recorded.get("median_ms")

    @property
    def arch(self) -> str | None:
        """The device architecture the replays ran on (None when none reported it)."""
        for r in [self.recorded] + [row.result for row in self.rows]:
            if r.get("arch"):
                return r["arch"]
        return None

    def best(self, rows=None) -> TrialRow | None:
        """The fastest completed trial (of `rows`, by default all), the earlier on a tie;
        None when none completed."""
        done = [r for r in (self.rows if rows is None else rows) if r.ms is not None]
        return min(done, key=lambda r: (r.ms, r.number)) if done else None


def load_outcome(path: str, storage: str | None, task_results: list[dict] | None = None,
                 name: str | None = None, study_prefix: str = "kir-tune") -> Outcome:
    """Read a record's study back (from `storage`, or from the tasks' returns when it
    lived in memory); `name`: the study's (default study_name(record))."""
    from kir.record import Record
    record = Record.load(path)
    name = name or study_name(record, study_prefix)
    if storage is None:
        rows, attrs = [], {}
        for result in task_results or []:
            if result and result.get("study") == name:
                rows += [TrialRow.from_json(d) for d in result["trials"]]
                attrs.update(result["user_attrs"])
    else:
        optuna = _optuna()
        study = optuna.load_study(study_name=name, storage=open_storage(storage))
        rows = [_row(t) for t in study.get_trials(deepcopy=False)]
        attrs = dict(study.user_attrs)
    baselines = [v for k, v in attrs.items() if k.startswith("recorded:") and isinstance(v, dict)]
    ok = [b for b in baselines if b.get("status") == "ok" and b.get("median_ms") is not None]
    recorded = dict(ok[0] if ok else (baselines[0] if baselines else {}))
    if len(ok) > 1:
        recorded["median_ms"] = statistics.median(b["median_ms"] for b in ok)
        values = [b["value_ms"] for b in ok if b.get("value_ms") is not None]
        recorded["value_ms"] = statistics.median(values) if values else None
    warnings = [v for k, v in sorted(attrs.items()) if k.startswith("warning:")]
    return Outcome(path, record, name, [r for r in rows if not r.skipped], recorded, attrs.get("space") or {},
                   [r for r in rows if r.skipped], warnings)


@dataclasses.dataclass(frozen=True)
class Client:
    """How the JIT client that will use the hand-off derives its key: what it
    specializes (`kir run`'s KIR_JIT_SPECIALIZE, KIR_JIT_BOUNDS, KIR_JIT_ARGS), its
    CONFIG records (None: kir.jit's default Options().config(), what `kir run` sends
    without options) and the code kind it loads. Code compiled for these is valid
    wherever the key matches. `from_descriptor`: a client declared in the cache
    directory (kir.jit.clients, docs/jit.md)."""
    specialize_grid: bool = False
    specialize_block: bool = False
    bounds: tuple[int, int] | str | None = None   #: "launch": the launch's block size (KIR_JIT_BOUNDS=launch)
    config: tuple[tuple[str, bytes], ...] | None = None
    specialize_args: bool = True
    kind: str = "cubin"
    name: str = "reference"

    @classmethod
    def from_descriptor(cls, d) -> Client:
        return cls(d.specialize_grid, d.specialize_block, d.bounds, tuple(d.config), d.specialize_args, d.kind,
                   d.name)

    def accepts(self, point: Point) -> str | None:
        """None when the JIT client may run `point`'s code for the recorded launch,
        else why not."""
        if not point.recorded_launch:
            return "another launch configuration changes what the app's launch computes"
        if point.recorded_code:
            return "the recorded code (the record has no LLVM IR): nothing to hand off"
        if point.specialize_dims and not (self.specialize_grid and self.specialize_block):
            return "its grid and block are constants, and the client's key does not cover them"
        if point.launch_bounds and not (self.specialize_block or self.bounds == "launch"):
            return "its launch bounds hold for one block size, and the client's key does not cover the block"
        if point.specialize_args and not self.specialize_args:
            return "its argument values are constants, and the client's key does not cover them"
        return None

    def key(self, record, arch: str) -> str:
        """The JIT key this client computes at the recorded launch
        (kir.replay.variant.jit_key with the client's specialization and CONFIG records)."""
        import math

        from kir.jit import Options
        from kir.replay.variant import Variant, jit_key
        bounds = (math.prod(record.launch.block), 0) if self.bounds == "launch" else self.bounds
        variant = Variant(args="jit" if record.kernel.jit_args and self.specialize_args else (),
                          specialize_grid=self.specialize_grid,
                          specialize_block=self.specialize_block or self.bounds == "launch", bounds=bounds,
                          options=Options())
        return jit_key(record, variant, arch, config=self.config)


@dataclasses.dataclass
class Handoff:
    """What a study handed to one JIT client: the trial, the JIT key, whether its code was
    stored in the cache, and why."""
    row: TrialRow | None      #: the trial handed to the JIT client (None: none eligible)
    key: str | None
    stored: bool
    reason: str
    client: str = "reference"  #: the client whose key this is (Client.name)
    conflict: dict | None = None  #: another result under the same key: which was kept (handoff's docstring)

    def to_json(self) -> dict:
        return {"trial": self.row.number if self.row else None, "key": self.key, "stored": self.stored,
                "reason": self.reason, "client": self.client, "conflict": self.conflict}


def client_arch(record, device_arch: str | None) -> str | None:
    """The arch a JIT client keys this record's launch with, and the arch its cache entry
    must carry (libkir/jit/client.cpp compares the entry's arch with it): the device's on
    CUDA ("sm_90"); on HIP the target-id of the code object the launch ran, which is what
    the hook reports (kir_hook_launch.arch: the registered bundle's target, "gfx942" for
    `--offload-arch=gfx942`), not the device's whole gcnArchName ("gfx942:sramecc+:xnack-").
    Code compiled for that target-id runs on the device the record was made on."""
    image = record.kernel.image
    if device_arch is None or image is None or image.kind != "code-object" or not image.arch:
        return device_arch
    return image.arch


def handoff(outcome: Outcome, client: Client, cache, store: str = "better", claimed: dict | None = None) -> Handoff:
    """Store the best trial the JIT client may run for the app's own launch in
    `cache` (a directory or kir.cache.Cache) under the key the client computes at
    that launch. `store`: "better" (only when faster than the recorded code),
    "always", or "never" (report only).

    One key, one result: records that share the key (the same kernel, values and
    dims for the client) compete, and the fastest verified trial is kept: `claimed`
    ({key: (record, ms)}, shared by one run's hand-offs) and the cache's own entry
    (its "tuned.median_ms") are compared with this trial; the loser is not stored
    and every such meeting is reported in `conflict`."""
    eligible = [r for r in outcome.rows if r.point is not None and client.accepts(r.point) is None]
    best = outcome.best(eligible)
    arch = client_arch(outcome.record, outcome.arch)
    if best is None or arch is None:
        return Handoff(None, None, False, "no verified trial at the recorded launch that the JIT client may run",
                       client.name)
    key = client.key(outcome.record, arch)
    recorded = outcome.recorded_ms
    if store == "never":
        return Handoff(best, key, False, "--store never", client.name)
    if store == "better" and recorded is not None and not best.ms < recorded:
        return Handoff(best, key, False, f"the best trial ({best.ms:.4f} ms) is not faster than the recorded code "
                                         f"({recorded:.4f} ms): nothing stored", client.name)
    from kir.cache import Cache
    target = None if cache is None else cache if hasattr(cache, "store") else Cache(str(cache))
    conflict = None
    other = (claimed or {}).get(key)
    if other is None and target is not None:
        entry = target.lookup(key)
        stored_ms = _float(entry.meta.get("tuned.median_ms")) if entry is not None else None
        if stored_ms is not None:
            other = (f"{entry.meta.get('tuned.record') or '?'} (in the cache)", stored_ms)
    if other is not None and other[0] != outcome.path:
        kept = "this" if best.ms < other[1] else "other"
        conflict = {"key": key, "other_record": other[0], "other_ms": other[1], "ms": best.ms, "kept": kept}
        if kept == "other":
            return Handoff(best, key, False, f"{other[0]} holds key {key} with a faster result ({other[1]:.4f} ms "
                                             f"against {best.ms:.4f} ms): kept", client.name, conflict)
    if claimed is not None:
        claimed[key] = (outcome.path, best.ms)
    if target is None:
        return Handoff(best, key, False, "no --jit-cache given", client.name, conflict)
    from kir.replay.variant import compile_variant
    variant = best.point.variant(bool(outcome.record.kernel.jit_args))
    variant.options = dataclasses.replace(variant.options, kind=client.kind)  # the kind the client loads
    compiled = compile_variant(outcome.record, variant, arch)
    from kir.jit import own_globals_refusal
    refusal = own_globals_refusal(compiled)
    if refusal is not None:  # verified in replay (which restores its copies), wrong in the app
        return Handoff(best, key, False, refusal, client.name, conflict)
    meta = dict(compiled.meta)
    meta.update({"tuned.by": "kir tune", "tuned.record": Path(outcome.path).name, "tuned.trial": str(best.number),
                 "tuned.point": best.point.describe(), "tuned.median_ms": f"{best.ms:.6g}",
                 "tuned.recorded_ms": "" if recorded is None else f"{recorded:.6g}", "tuned.client": client.name})
    target.store(key, compiled.code, compiled.kind, compiled.arch, meta)
    reason = "stored" if conflict is None else f"stored (replacing {conflict['other_record']}'s " \
                                                 f"{conflict['other_ms']:.4f} ms)"
    return Handoff(best, key, True, reason, client.name, conflict)


def _float(text) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def speedup(recorded: float | None, ms: float | None) -> float | None:
    if recorded is None or ms is None or ms <= 0 or math.isnan(ms):
        return None
    return recorded / ms
