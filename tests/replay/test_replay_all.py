"""`kir replay --all DIR` (a regression run over a recording) and its fan-out over
Dask (kir.distribute), without a GPU: records written by the C++ writer
(kir._core.RecordBuilder) for kernels of a real nvcc-built cubin, planned
(`--plan`: every chunk read, hashes recomputed) in this process and on a
LocalCluster of CPU worker processes; the table, the JSON, the exit codes; a
damaged record; an executor standing in for the GPU launch (tests/support/replay_fakes.py)
that fails one record, changes the times, or kills its worker process; workers
started with their own CUDA_VISIBLE_DEVICES; joining a running scheduler; and
that `kir replay --all` without --workers never imports Dask. On a GPU: the
fixture apps recorded, then replayed all at once with 1 worker and with all GPUs
(records per minute)."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import kir
from kir.record import RECORD_HEADER, Record
from replay_records import KERNELS, make_record

TESTS = Path(__file__).resolve().parents[1] / "support"  # the rigs a child imports
@pytest.fixture
def recording(tmp_path, built) -> Path:
    """Five records (four kernels, axpy twice with another grid) in tmp_path/rec."""
    directory = tmp_path / "rec"
    cubin = built["kernels_sm90.cubin"]
    for name in KERNELS:
        make_record(directory, cubin, name)
    make_record(directory, cubin, KERNELS[0], grid=(8, 2, 1), block=(64, 1, 1))
    return directory


def cli(*args, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """The installed `kir` CLI in a fresh process; tests/ importable (--executor replay_fakes:...)."""
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
                   **(env or {})}
    return subprocess.run([sys.executable, "-m", "kir", *map(str, args)], capture_output=True, text=True,
                          env=environment, timeout=timeout)


def listed(directory: Path) -> list[str]:
    """The record files, in the order `kir replay --all` must report them (by name)."""
    return sorted(p.name for p in (directory / "records").iterdir() if p.name.endswith(".kirrec"))


def table_rows(stdout: str) -> list[list[str]]:
    lines = stdout.splitlines()
    assert lines[0].split()[:5] == ["#", "record", "status", "median", "ms"]
    return [line.split() for line in lines[1:] if line[:1].isdigit() and not line.split()[1] == "records:"]


# --- in this process ---------------------------------------------------------------------------------


def test_plan_all_in_process(recording):
    result = cli("replay", "--all", recording, "--plan", "--json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["format"] == "kir.replay-all/1" and out["mode"] == "plan" and out["exit_status"] == 0
    assert out["cluster"]["kind"] == "in-process" and out["cluster"]["workers"] == 1
    rows = out["records"]
    assert [r["record"] for r in rows] == listed(recording)
    for row in rows:
        record = Record.load(recording / "records" / row["record"])  # the reader, independently of the rows
        assert row["status"] == "planned" and row["error"] is None and row["hashes_match"] is True
        assert row["kernel"] == kir_demangled(record.kernel.name) == record.kernel.demangled
        assert row["static_hash"] == record.kernel.static_hash and row["launch_identity"] == record.launch.launch_identity
        assert row["code"] == "cubin" and row["median_ms"] is None and row["change"] is None
        assert row["worker"].rsplit(":", 1)[0] == socket.gethostname()
    assert {r["kernel"] for r in rows} == {kir_demangled(k) for k in KERNELS}
    assert out["summary"]["records"] == 5 and out["summary"]["planned"] == 5 and out["summary"]["error"] == 0

    text = cli("replay", "--all", recording, "--plan")
    assert text.returncode == 0 and text.stderr == ""
    lines = table_rows(text.stdout)
    assert [line[0] for line in lines] == ["0", "1", "2", "3", "4"]
    for line, name in zip(lines, listed(recording)):
        static, identity = name.split(".")[:2]
        assert line[1] == f"{static[:12]}.{identity[:12]}" and line[2] == "planned"
    assert "5 records: 5 planned;" in text.stdout.splitlines()[-1] and "in this process" in text.stdout


def test_a_device_fault_costs_only_its_own_record(recording):
    """The second record's replay is a sticky device fault (CUDA_ERROR_ILLEGAL_ADDRESS):
    in the process it ran in, every later replay fails (as cuDevicePrimaryCtxRetain
    does after one). The records after it run in a fresh process and pass; a fault
    there too costs only its record again."""
    names = listed(recording)
    result = cli("replay", "--all", recording, "--executor", "replay_fakes:timed", "--json",
                 env={"FAKE_FAULT": names[1]})
    assert result.returncode == 2, result.stderr
    rows = json.loads(result.stdout)["records"]
    assert [r["record"] for r in rows] == names
    assert [r["status"] for r in rows] == ["passed", "error", "passed", "passed", "passed"], \
        [r["error"] for r in rows]
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in rows[1]["error"] and rows[1]["device_fault"] == 700
    assert all(r["device_fault"] is None for i, r in enumerate(rows) if i != 1)
    pids = [r["worker"].rsplit(":", 1)[1] for i, r in enumerate(rows) if i != 1]
    assert pids[0] != pids[1] and len(set(pids[1:])) == 1  # the rest: one fresh process


def test_stdout_carries_only_the_json(recording):
    """What replayed code prints to file descriptor 1 from C (a kernel's device printf,
    written by the driver) goes to stderr: `--json` output parses, with --all and
    with a fault's fresh process too."""
    names = listed(recording)
    for extra in ({}, {"FAKE_FAULT": names[0]}):
        result = cli("replay", "--all", recording, "--executor", "replay_fakes:timed", "--json",
                     env={"FAKE_PRINTF": "device printf from", **extra})
        out = json.loads(result.stdout)  # nothing but the JSON
        assert len(out["records"]) == 5
        for name in names[1 if extra else 0:]:
            assert f"device printf from {name}\n" in result.stderr
    table = cli("replay", "--all", recording, "--executor", "replay_fakes:timed", env={"FAKE_PRINTF": "printed"})
    assert table.returncode == 0 and f"printed {names[0]}" in table.stdout  # without --json: as it was


def kir_demangled(name: str) -> str:
    return kir.demangle(name)


def test_a_damaged_record_is_an_error_row(recording):
    names = listed(recording)
    body_byte = recording / "records" / names[1]
    data = bytearray(body_byte.read_bytes())
    data[RECORD_HEADER.size + 5] ^= 0xFF  # the checksum no longer matches the body
    body_byte.write_bytes(bytes(data))
    chunk = Record.load(recording / "records" / names[3]).regions[0].epilogue[0]
    chunk_path = recording / "chunks" / f"{chunk}.kirc"
    damaged = bytearray(chunk_path.read_bytes())
    damaged[-1] ^= 0xFF  # a chunk only this record names: its payload no longer hashes to its name
    chunk_path.write_bytes(bytes(damaged))

    result = cli("replay", "--all", recording, "--plan", "--json")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    rows = json.loads(result.stdout)["records"]
    assert [r["status"] for r in rows] == ["planned", "error", "planned", "error", "planned"]
    assert "checksum of the body" in rows[1]["error"] and rows[1]["kernel"] is None
    assert chunk in rows[3]["error"] and rows[3]["kernel"] is not None
    errors = result.stderr.splitlines()
    assert len(errors) == 2 and all(e.startswith("kir: error: " + str(recording / "records")) for e in errors)
    assert names[1] in errors[0] and names[3] in errors[1]
    text = cli("replay", "--all", recording, "--plan")
    assert text.returncode == 2 and "5 records: 3 planned, 2 errors;" in text.stdout


@pytest.mark.parametrize("args, message", [
    (["--all", "{nowhere}"], "not a kir recording"),
    (["--all", "{empty}"], "no records to replay"),
    ([], "give a RECORD, or --all DIR"),
    (["{record}", "--all", "{rec}"], "not both"),
    (["--all", "{rec}", "--grid", "1,1,1"], "--grid launches a variant of one record: not with --all"),
    (["--all", "{rec}", "--specialize", "jit"], "make a variant of one record: not with --all"),
    (["--all", "{rec}", "-O", "2"], "make a variant of one record: not with --all"),
    (["--all", "{rec}", "--workers", "0"], "--workers 0: expected a positive number"),
    (["--all", "{rec}", "--workers", "two"], "--workers two"),
    (["{record}", "--workers", "2"], "--workers needs --all DIR"),
    (["{record}", "--scheduler", "tcp://x:1"], "--scheduler needs --all DIR"),
    (["--all", "{rec}", "--baseline", "{record}"], "not JSON"),
    (["--all", "{rec}", "--baseline", "{nowhere}"], "nowhere: missing"),
    (["--all", "{rec}", "--executor", "replay_fakes"], "expected MODULE:FUNCTION"),
    (["--all", "{rec}", "--executor", "no_such_module:f"], "cannot import no_such_module"),
    (["--all", "{rec}", "--executor", "replay_fakes:absent"], "replay_fakes has no function absent"),
    (["--all", "{rec}", "--repeat", "0"], "--repeat 0: must be at least 1"),
    (["--all", "{rec}", "--scheduler", "tcp://a:1", "--scheduler-file", "f"], "give one"),
])
def test_bad_input(recording, tmp_path, args, message):
    (tmp_path / "empty" / "records").mkdir(parents=True)
    places = {"nowhere": tmp_path / "nowhere", "empty": tmp_path / "empty", "rec": recording,
              "record": recording / "records" / listed(recording)[0]}
    result = cli("replay", *[a.format(**places) for a in args], "--plan")
    assert result.returncode == 2 and result.stderr.startswith("kir: error: "), result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr and result.stdout == ""


def test_without_a_gpu_every_record_says_so(recording):
    try:
        from cuda.bindings import driver
        if driver.cuInit(0)[0] == driver.CUresult.CUDA_SUCCESS:
            pytest.skip("this machine has a CUDA driver")
    except Exception:
        pass
    result = cli("replay", "--all", recording, "--json")
    assert result.returncode == 2
    rows = json.loads(result.stdout)["records"]
    assert [r["status"] for r in rows] == ["error"] * 5 and all("no CUDA device" in r["error"] for r in rows)


def test_no_dask_without_workers(recording):
    """`import kir`, `kir replay RECORD --plan` and `kir replay --all DIR` (in this
    process) never import dask or distributed: kir's start-up stays light."""
    record = recording / "records" / listed(recording)[0]
    probe = ("import sys, io, contextlib\n"
             "from kir.cli import main\n"
             "with contextlib.redirect_stdout(io.StringIO()):\n"
             f"    codes = [main(['replay', '--plan', {str(record)!r}]), main(['replay', '--all', {str(recording)!r}, '--plan']),\n"
             f"             main(['replay', '--all', {str(recording)!r}])]\n"
             "import json\n"
             "print(json.dumps([codes, sorted(m for m in sys.modules\n"
             "                                if m.split('.')[0] in ('dask', 'distributed', 'dask_cuda'))]))\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    codes, modules = json.loads(proc.stdout)
    assert codes[:2] == [0, 0] and codes[2] in (0, 1, 2) and modules == [], proc.stdout


# --- the fan-out --------------------------------------------------------------------------------------


try:
    import distributed  # noqa: F401
except ImportError:
    distributed = None
needs_dask = pytest.mark.skipif(distributed is None, reason="dask.distributed not installed (pip install --group test)")


def comparable(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in ("worker", "seconds", "devices")} for r in rows]


@needs_dask
def test_plan_all_on_workers_agrees_with_in_process(recording):
    here = json.loads(cli("replay", "--all", recording, "--plan", "--json").stdout)
    result = cli("replay", "--all", recording, "--plan", "--json", "--workers", "2")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    # One worker per core without a GPU; on a GPU machine, GPU workers (kir.distribute.Cluster).
    from kir.distribute import gpu_count
    kinds = {"LocalCluster"} if gpu_count() == 0 else {"SpecCluster", "LocalCUDACluster"}
    assert out["cluster"]["kind"] in kinds and out["cluster"]["workers"] == 2
    assert out["cluster"]["address"].startswith("tcp://127.0.0.1:")
    assert comparable(out["records"]) == comparable(here["records"])
    assert out["summary"]["planned"] == 5 and out["summary"]["records_per_minute"] > 0


@needs_dask
def test_failed_record_baseline_and_exit_1(recording, tmp_path):
    """A stand-in for the launch (replay_fakes.timed) that fails one record: the
    failed row and its mismatch under the table, exit 1; a second run at twice the
    time against the first as --baseline: +100.0% for every record."""
    names = listed(recording)
    first = cli("replay", "--all", recording, "--executor", "replay_fakes:timed", "--json", "--repeat", "3")
    assert first.returncode == 0, first.stderr
    baseline = tmp_path / "baseline.json"
    baseline.write_text(first.stdout)
    times = {r["record"]: r["median_ms"] for r in json.loads(first.stdout)["records"]}
    for name in names:  # the time the fake derives from the record's own grid and block
        launch = Record.load(recording / "records" / name).launch
        assert times[name] == pytest.approx(prod(launch.grid) * prod(launch.block) / 1e6)

    env = {"FAKE_FAIL": names[2], "FAKE_SCALE": "2"}
    for extra in ([], ["--workers", "2"]):
        result = cli("replay", "--all", recording, "--executor", "replay_fakes:timed", "--baseline", baseline,
                     *extra, env=env)
        assert result.returncode == 1, result.stderr
        lines = table_rows(result.stdout)
        assert [line[2] for line in lines] == ["passed", "passed", "failed", "passed", "passed"]
        for line, name in zip(lines, names):
            assert float(line[3]) == pytest.approx(2 * times[name], abs=1e-4) and line[4] == "+100.0%"
        first_region = Record.load(recording / "records" / names[2]).regions[0]
        assert f"  #2 {first_region.label}: {first_region.size} bytes differ, the first at offset 0" in result.stdout
        assert "5 records: 4 passed, 1 failed;" in result.stdout
        out = json.loads(cli("replay", "--all", recording, "--executor", "replay_fakes:timed", "--baseline",
                             baseline, "--json", *extra, env=env).stdout)
        assert [r["change"] for r in out["records"]] == pytest.approx([1.0] * 5)
        assert [r["baseline_ms"] for r in out["records"]] == [times[n] for n in names]
        assert out["exit_status"] == 1 and out["summary"]["failed"] == 1


def prod(values) -> int:
    n = 1
    for v in values:
        n *= v
    return n


@needs_dask
def test_a_record_that_kills_its_worker(recording):
    """The executor os._exit()s on one record: that record is an error row saying its
    worker died (tried twice), the others pass, in order, and the run ends."""
    names = listed(recording)
    start = time.monotonic()
    result = cli("replay", "--all", recording, "--executor", "replay_fakes:timed", "--workers", "2", "--json",
                 env={"FAKE_CRASH": names[1]}, timeout=240)
    assert time.monotonic() - start < 240
    assert result.returncode == 2, result.stderr
    rows = json.loads(result.stdout)["records"]
    assert [r["record"] for r in rows] == names
    assert [r["status"] for r in rows] == ["passed", "error", "passed", "passed", "passed"]
    assert "the worker process running it died, 2 times" in rows[1]["error"]
    assert f"kir: error: {recording / 'records' / names[1]}: the worker process running it died" in result.stderr


@needs_dask
def test_a_device_fault_restarts_its_dask_worker(recording):
    """On one Dask worker, the second record's replay is a sticky device fault: the
    worker's process would fail every later record (replay_fakes.timed, as the driver
    does), so the worker is restarted — the records after it pass in a new process —
    and the faulting row says so."""
    names = listed(recording)
    result = cli("replay", "--all", recording, "--executor", "replay_fakes:timed", "--json", "--workers", "1",
                 env={"FAKE_FAULT": names[1]})
    assert result.returncode == 2, result.stderr
    rows = json.loads(result.stdout)["records"]
    assert [r["status"] for r in rows] == ["passed", "error", "passed", "passed", "passed"], \
        [(r["error"], r["notes"], r["worker"]) for r in rows]
    assert rows[1]["device_fault"] == 700 and "CUDA_ERROR_ILLEGAL_ADDRESS" in rows[1]["error"]
    pids = [r["worker"].rsplit(":", 1)[1] for r in rows]
    assert pids[0] == pids[1] and len(set(pids[2:])) == 1 and pids[2] != pids[1], pids
    [note] = [n for n in rows[1]["notes"] if "Dask worker" in n]
    assert note.startswith("the device fault killed the CUDA context of Dask worker tcp://127.0.0.1:") and \
        note.endswith(": restarted (a fresh process for the records after it)"), note
    assert all(not r["notes"] or "Dask worker" not in " ".join(r["notes"]) for i, r in enumerate(rows) if i != 1)


@needs_dask
def test_an_executor_that_raises_or_returns_garbage(recording):
    here = cli("replay", "--all", recording, "--executor", "replay_fakes:raises")
    assert here.returncode == 2 and "kir: internal error replaying" in here.stderr and "Traceback" in here.stderr
    assert "5 records: 5 errors;" in here.stdout
    workers = cli("replay", "--all", recording, "--executor", "replay_fakes:raises", "--workers", "2", "--json")
    rows = json.loads(workers.stdout)["records"]
    assert workers.returncode == 2
    assert [r["error"] for r in rows] == [f"ValueError: the executor broke on {n}" for n in listed(recording)]
    garbage = json.loads(cli("replay", "--all", recording, "--executor", "replay_fakes:not_a_row", "--json").stdout)
    assert all("the executor returned 'int', not a row" in r["error"] for r in garbage["records"])


@needs_dask
def test_map_items_in_order_with_failures():
    import replay_fakes
    from kir.distribute import Cluster, Failure, map_items
    items = ["a", "b", "crash", "c", "raise", "d", "e"]
    with Cluster(workers=2, gpus=0) as cluster:
        assert cluster.kind == "LocalCluster" and cluster.workers == 2
        seen = []
        results = map_items(cluster, replay_fakes.crash_on, items, on_result=lambda i, r: seen.append(i))
    assert sorted(seen) == list(range(len(items)))
    assert [r[0] if isinstance(r, tuple) else r for r in results][:2] == ["a", "b"]
    assert isinstance(results[2], Failure) and results[2].worker_died
    assert results[4] == Failure("RuntimeError: asked to raise")
    assert [r[0] for r in results if isinstance(r, tuple)] == ["a", "b", "c", "d", "e"]
    assert all(r[1] != os.getpid() for r in results if isinstance(r, tuple))


GPU_WORKERS = """
import json, os, sys
sys.modules["dask_cuda"] = None  # as on a machine without dask-cuda
from kir.distribute import Cluster
import replay_fakes
with Cluster(workers=3, gpus=2) as cluster:
    found = cluster.client.run(replay_fakes.environment)
    names = sorted(w["name"] for w in cluster.client.scheduler_info(n_workers=-1)["workers"].values())
    print(json.dumps({"kind": cluster.kind, "names": names, "found": list(found.values()), "me": os.getpid()}))
"""


@needs_dask
def test_gpu_workers_see_their_own_device():
    """Without dask-cuda, local GPU workers are nannies started with
    CUDA_VISIBLE_DEVICES naming their GPU first (the list this process sees,
    rotated), several workers per GPU in turn when there are more workers. In a
    process of its own that sees devices 3 and 5, with Dask's NVML monitor off
    from the start: those devices need not exist, and on a GPU machine NVML,
    once started by an earlier cluster in this process, would refuse them."""
    from kir.distribute import _device_lists
    assert _device_lists(3, ["0", "1"]) == ["0,1", "1,0", "0,1"]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "3,5", "DASK_DISTRIBUTED__DIAGNOSTICS__NVML": "False",
           "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", GPU_WORKERS], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.splitlines()[-1])
    assert out["kind"] == "SpecCluster"
    assert out["names"] == ["gpu-0", "gpu-1", "gpu-2"]
    assert sorted(devices for _, devices in out["found"]) == ["3,5", "3,5", "5,3"]
    assert len({pid for pid, _ in out["found"]} | {out["me"]}) == 4  # a process each


@needs_dask
def test_joining_a_running_cluster(recording, tmp_path):
    import distributed
    here = json.loads(cli("replay", "--all", recording, "--plan", "--json").stdout)
    scheduler_file = tmp_path / "scheduler.json"  # written by the scheduler, as under dask-mpi
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                                  scheduler_kwargs={"scheduler_file": str(scheduler_file)}) as c, \
            distributed.Client(c) as client:
        result = cli("replay", "--all", recording, "--plan", "--json", "--scheduler", c.scheduler_address)
        assert result.returncode == 0, result.stderr
        out = json.loads(result.stdout)
        assert out["cluster"] == {**out["cluster"], "kind": "scheduler", "address": c.scheduler_address, "workers": 1}
        assert comparable(out["records"]) == comparable(here["records"])
        [worker_pid] = client.run(os.getpid).values()
        assert {r["worker"] for r in out["records"]} == {f"{socket.gethostname()}:{worker_pid}"}
        by_file = cli("replay", "--all", recording, "--plan", "--json", "--scheduler-file", scheduler_file)
        assert by_file.returncode == 0 and json.loads(by_file.stdout)["cluster"]["address"] == c.scheduler_address


@needs_dask
def test_an_unreachable_scheduler(recording):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    result = cli("replay", "--all", recording, "--plan", "--scheduler", f"tcp://127.0.0.1:{port}",
                 env={"DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT": "2s"}, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"kir: error: Dask: cannot reach tcp://127.0.0.1:{port}: "), result.stderr


# --- on the GPU -------------------------------------------------------------------------------------------

GPU_APPS = ["rec_vector_add", "rec_jacobi", "rec_pointer_chase", "rec_device_global", "rec_same_kernel_args"]


@needs_dask
def test_replay_all_on_gpus(gpu, built, tmp_path):
    """Every fixture app recorded into one recording, then `kir replay --all`: in
    this process, on 1 worker and on one worker per GPU: every record passes, the
    same rows each way, each worker on its own GPU; records per minute printed."""
    from kir.distribute import gpu_count
    directory = tmp_path / "rec"
    for name in GPU_APPS:
        result = cli("record", "--max-per-kernel", "8", "-o", directory, "--", built[name])
        assert result.returncode == 0, result.stderr[-2000:]
    runs = {}
    for label, extra in (("in-process", []), ("1 worker", ["--workers", "1"]), ("all GPUs", ["--workers"])):
        result = cli("replay", "--all", directory, "--json", "--repeat", "3", *extra, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        runs[label] = json.loads(result.stdout)
        assert {r["status"] for r in runs[label]["records"]} == {"passed"}
    for label in runs:
        assert [r["record"] for r in runs[label]["records"]] == listed(directory)
        assert [(r["status"], r["verified"], r["launch_identity"]) for r in runs[label]["records"]] == \
            [(r["status"], r["verified"], r["launch_identity"]) for r in runs["in-process"]["records"]]
    gpus = gpu_count()
    assert runs["all GPUs"]["cluster"]["workers"] == gpus
    if gpus > 1:
        assert len({r["devices"].split(",")[0] for r in runs["all GPUs"]["records"]}) > 1
    print("records per minute:", {k: round(v["summary"]["records_per_minute"], 1) for k, v in runs.items()})


@needs_dask
def test_a_faulting_record_on_the_gpu_costs_only_itself(gpu, built, tmp_path):
    """Records of the real sm_90 axpy: one whose `y` argument points at an address no
    allocation holds (its kernel faults: CUDA_ERROR_ILLEGAL_ADDRESS, sticky), four
    good ones. Whatever their order, the faulting one is an error row with
    device_fault 700 and every other record passes: in this process, and on one
    Dask worker (restarted after the fault)."""
    from record_builders import axpy_record

    directory = tmp_path / "rec"
    bad, _, _ = axpy_record(directory, built["kernels_sm90.cubin"], a=9.0,
                            alter=lambda args: args.__setitem__(2, (0x10).to_bytes(8, "little")))
    for a in (1.0, 2.0, 3.0, 4.0):
        axpy_record(directory, built["kernels_sm90.cubin"], a=a)
    result = cli("replay", "--all", directory, "--json", timeout=600)
    assert result.returncode == 2, result.stderr[-3000:]
    rows = {r["record"]: r for r in json.loads(result.stdout)["records"]}
    assert len(rows) == 5
    faulted = rows.pop(bad.path.name)
    assert faulted["status"] == "error" and faulted["device_fault"] == 700, faulted
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in faulted["error"]
    assert [r["status"] for r in rows.values()] == ["passed"] * 4, [r["error"] for r in rows.values()]
    # on a Dask worker: the worker that hit the fault is restarted, the others still pass
    on_worker = cli("replay", "--all", directory, "--json", "--workers", "1", timeout=600)
    assert on_worker.returncode == 2, on_worker.stderr[-3000:]
    rows = {r["record"]: r for r in json.loads(on_worker.stdout)["records"]}
    faulted = rows.pop(bad.path.name)
    assert faulted["device_fault"] == 700 and any("restarted" in n for n in faulted["notes"]), faulted
    assert [r["status"] for r in rows.values()] == ["passed"] * 4, [r["error"] for r in rows.values()]


def test_workers_without_dask_say_how_to_get_it(recording):
    """On a machine without Dask, --workers is an error naming the extra to install."""
    probe = ("import sys\nsys.modules['distributed'] = None  # as if not installed\n"
             "from kir.cli import main\n"
             f"sys.exit(main(['replay', '--all', {str(recording)!r}, '--plan', '--workers', '2']))\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    from kir.errors import distribution_name
    assert proc.stderr.startswith("kir: error: --workers and --scheduler: Dask (distributed) is not installed: "
                                  f"pip install '{distribution_name()}[distributed]'"), proc.stderr
