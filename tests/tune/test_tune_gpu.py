"""Record → tune → run on a GPU (issue 13 §2, end to end): tests/fixtures/jit_app
(daxpy with `a` a Proteus runtime constant, its IR embedded) is recorded, its
a=2.5 launch tuned by `kir tune` (real replays of variants compiled from the
record's IR), the winner stored in a kernel-object cache, and the app run again
under the reference JIT client with that cache: every a=2.5 launch is a hit and
runs the tuned object, the output is the plain run's bit for bit, and the
kernel's time (the app's CUDA events) is printed beside the tuner's measurement
(benchmarks/tune_e2e.py keeps the figures). Also: a trial that faults takes
down only its own replay process."""
from __future__ import annotations

import json
import re
import struct
import subprocess

import pytest

pytest.importorskip("optuna")

from kir.record import Record  # noqa: E402

LAUNCHES = 200
N = "8388608"  # 2^23 doubles: ~40 us a launch on an H200, well above the host's cost of a launch


def app_time(stderr: str) -> float:
    found = re.search(r"jit_app: \d+ launches of a=[\d.]+ in ([\d.]+) ms", stderr)
    assert found, stderr[-2000:]
    return float(found.group(1))


def host_ns(stderr: str) -> float:
    return float(re.search(r"host ([\d.]+) ns per launch", stderr).group(1))


@pytest.fixture
def daxpy_record(gpu, built, kir_cli, tmp_path):
    if "jit_app" not in built:
        pytest.skip("jit_app is not built here (it needs clang-22's IR)")
    out = tmp_path / "rec"
    result = kir_cli("record", "-o", out, "--", built["jit_app"], "20", "2.5", N)
    assert result.returncode == 0, result.stderr[-3000:]
    for path in sorted((out / "records").glob("*.kirrec")):
        record = Record.load(path)
        if record.launch.args[0] == struct.pack("<d", 2.5):
            assert record.kernel.ir is not None and record.kernel.jit_args
            return path
    pytest.fail("no record of the a=2.5 launch")


def test_record_tune_run(daxpy_record, built, kir_cli, tmp_path):
    cache = tmp_path / "cache"
    tuned = kir_cli("tune", daxpy_record, "--preset", "compiler", "--trials", "10", "--seed", "1",
                    "--jit-cache", cache, "--store", "always", "--json")
    assert tuned.returncode == 0, tuned.stderr[-3000:]
    r = json.loads(tuned.stdout)["records"][0]
    assert r["arch"].startswith("sm_") and r["recorded"]["verified"]
    done = [t for t in r["trials"] if t["state"] == "complete"]
    assert len(done) >= 5, [t["result"].get("error") for t in r["trials"]]
    for t in done:  # real replays: verified bit for bit, compiled, measured
        assert t["result"]["verified"] and t["result"]["registers"] and t["result"]["compile_seconds"] > 0
        assert len(t["result"]["times_ms"]) == 5  # GRAPH_ROUNDS rounds of 20 launches in a CUDA graph
    h = r["handoff"]
    assert h["stored"], h
    app = built["jit_app"]
    plain = subprocess.run([app, str(LAUNCHES), "2.5", N], capture_output=True, text=True, check=True)
    stats_path = tmp_path / "stats.json"
    client = kir_cli("run", "--jit-cache", cache, "--no-compile", "--stats", stats_path, "--", app, str(LAUNCHES), "2.5", N)
    assert client.returncode == 0, client.stderr[-3000:]
    stats = json.loads(stats_path.read_text())
    assert stats["hits"] == LAUNCHES and stats["substituted"] == LAUNCHES, stats
    assert stats["substitute_failures"] == 0
    assert client.stdout == plain.stdout, "the tuned kernel changed the output"
    plain_ms, tuned_ms = app_time(plain.stderr), app_time(client.stderr)
    tuner_ratio = h["median_ms"] / r["recorded"]["median_ms"]
    app_ratio = tuned_ms / plain_ms
    print(f"tuner: recorded {r['recorded']['median_ms']:.4f} ms, hand-off {h['median_ms']:.4f} ms "
          f"(ratio {tuner_ratio:.3f}); app: plain {plain_ms / LAUNCHES * 1e3:.2f} us, tuned "
          f"{tuned_ms / LAUNCHES * 1e3:.2f} us per launch (ratio {app_ratio:.3f}); host per launch: plain "
          f"{host_ns(plain.stderr):.0f} ns, under the client {host_ns(client.stderr):.0f} ns")
    # The app's kernel time moves as the tuner measured (within noise).
    assert abs(app_ratio - tuner_ratio) < 0.1, (app_ratio, tuner_ratio)


def test_the_trial_process_keeps_its_replayer_and_is_restarted(daxpy_record):
    """Trials of one record reuse the child's Replayer (the compiled code is cached
    by JIT key: the same point again is not compiled again); a child that dies is
    that trial's error, and the next trial starts a fresh one (here: killed between
    trials)."""
    from kir.tune.space import Point
    from kir.tune.trial import TrialProcess
    record = Record.load(daxpy_record)
    ok = Point(block=tuple(record.launch.block), grid=tuple(record.launch.grid), repeat=2).to_json()
    with TrialProcess() as process:
        first = process.run(str(daxpy_record), ok)
        assert first["status"] == "ok", first
        wide = dict(ok, block=[1024, 1, 1], grid=[-(-record.launch.grid[0] * record.launch.block[0] // 1024), 1, 1],
                    recorded_launch=False)
        assert process.run(str(daxpy_record), wide)["status"] == "ok"
        child = process.proc
        child.kill()
        child.wait()
        again = process.run(str(daxpy_record), ok)
        assert again["status"] == "ok" and again["jit_key"] == first["jit_key"] and process.proc is not child


def test_trial_results_are_typed_and_carry_compile_steps(daxpy_record):
    """Issue 24 §3 on the GPU: a verified trial carries kir.jit's time per step and
    its constant memory; a variant kir.jit refuses is an error of kind "compile",
    one the device refuses to launch (a block over 1024 threads) of kind "launch"."""
    from kir.tune.space import Point
    from kir.tune.trial import TrialProcess
    record = Record.load(daxpy_record)
    ok = Point(block=tuple(record.launch.block), grid=tuple(record.launch.grid), repeat=2).to_json()
    with TrialProcess() as process:
        first = process.run(str(daxpy_record), ok)
        assert first["status"] == "ok" and first["error_kind"] is None, first
        assert {"specialize", "optimize", "codegen", "assemble"} <= set(first["compile_timings"]), first
        assert first["constant_bytes"].get("cmem[0]", 0) > 0, first
        bad = process.run(str(daxpy_record), dict(ok, pipeline="function(no-such-pass)"))
        assert (bad["status"], bad["error_kind"]) == ("error", "compile"), bad
        wide = process.run(str(daxpy_record), dict(ok, block=[2048, 1, 1], recorded_launch=False))
        assert wide["status"] == "error" and wide["error_kind"] in ("compile", "launch"), wide


def test_graph_timing_leaves_out_the_launch_latency(daxpy_record):
    """The same code timed two ways: alone between events (the launch latency in
    each time) and back to back in a CUDA graph (what an app's stream of launches
    costs per launch); both verify, the graph's per-launch time is the smaller."""
    from kir.replay import Replayer, Variant
    with Replayer(Record.load(daxpy_record)) as replayer:
        each = replayer.run(Variant(repeat=20))
        graph = replayer.run(Variant(repeat=50, timing="graph"))
    assert each.verified and graph.verified
    assert len(graph.times_ms) == 5 and all(t > 0 for t in graph.times_ms)
    print(f"daxpy 2^23: each {each.median_ms * 1e3:.2f} us, graph {graph.median_ms * 1e3:.2f} us per launch")
    assert graph.median_ms < each.median_ms


def test_tune_over_one_worker_per_gpu(daxpy_record, kir_cli, tmp_path):
    """`kir tune --workers`: one Dask worker per GPU, the record's trials split over
    them through one Optuna journal; every trial a real, verified replay."""
    from kir.distribute import gpu_count
    gpus = gpu_count()
    journal = tmp_path / "tune.journal"
    # contraction fixed: the compiler preset searches it, and daxpy contracted otherwise
    # than recorded is a (correct) mismatch, not what this test is about
    out = kir_cli("tune", daxpy_record, "--preset", "compiler", "--fixed-fp-contract", "auto", "--trials", "8",
                  "--seed", "4", "--workers", "--storage", f"journal:{journal}", "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout)["records"][0]
    assert len(r["trials"]) == 8
    assert all(t["state"] == "complete" and t["result"]["verified"] for t in r["trials"]), r["trials"]
    workers = {t["worker"] for t in r["trials"]}
    assert len(workers) == min(gpus, 8), (gpus, workers)
    print(f"kir tune --workers on {gpus} GPUs: 8 trials on {len(workers)} workers")


def test_tune_with_activity_timing(daxpy_record, kir_cli, tmp_path):
    """A space timed by CUPTI's kernel records (timing "activity", the timing extra):
    the baseline and the trials are real, verified replays with kernel-only times."""
    pytest.importorskip("cupti", reason="cupti-python is not installed (the timing extra)")
    space = tmp_path / "space.json"
    space.write_text(json.dumps({"preset": "compiler", "timing": "activity", "repeat": 10}))
    tuned = kir_cli("tune", daxpy_record, "--space", space, "--trials", "4", "--seed", "2", "--json")
    assert tuned.returncode == 0, tuned.stderr[-3000:]
    r = json.loads(tuned.stdout)["records"][0]
    assert r["space"]["timing"] == "activity" and r["recorded"]["verified"]
    assert len(r["recorded"]["times_ms"]) == 10 and all(t > 0 for t in r["recorded"]["times_ms"])
    done = [t for t in r["trials"] if t["state"] == "complete"]
    assert len(done) >= 2, [t["result"].get("error") for t in r["trials"]]
    assert all(t["result"]["verified"] and t["result"]["median_ms"] > 0 for t in done)
    print(f"daxpy 2^23, activity timing: recorded {r['recorded']['median_ms'] * 1e3:.2f} us, "
          f"best {r['best']['median_ms'] * 1e3:.2f} us")


def test_results_dir_and_throughput_of_a_gpu_study(daxpy_record, kir_cli, tmp_path):
    """--results-dir of real replays (issue 24 §4): each trial's wall time split into
    kir.jit's compile, the replay process's run and the overhead; and
    benchmarks/tune_throughput.py's figures over the same record."""
    import csv
    import sys
    from pathlib import Path
    out = tmp_path / "results"
    tuned = kir_cli("tune", daxpy_record, "--preset", "compiler", "--trials", "8", "--seed", "1",
                    "--results-dir", out, "--json")
    assert tuned.returncode == 0, tuned.stderr[-3000:]
    (r,) = json.loads(tuned.stdout)["records"]
    measured = [t for t in r["trials"] if t["state"] == "complete" and not t["result"].get("repeated")]
    assert len(measured) >= 4, [t["result"].get("error") for t in r["trials"]]
    for t in r["trials"]:
        p, res = t["phases"], t["result"]
        assert p["wall_s"] >= p["compile_s"] + p["run_s"] - 1e-6 and p["overhead_s"] >= 0
    for t in measured:
        p, res = t["phases"], t["result"]
        assert p["compile_s"] == (res["compile_seconds"] or 0.0)
        assert p["run_s"] == pytest.approx(res["replay_seconds"] - p["compile_s"])
        assert p["run_s"] > sum(res["times_ms"]) / 1e3  # the timed launches are inside it
    assert any(t["phases"]["compile_s"] > 0 for t in measured)
    (entry,) = json.loads((out / "summary.json").read_text())["records"]
    with open(out / entry["folder"] / "trials.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == len(r["trials"])
    assert entry["throughput"]["trials_per_minute"] > 0 and (out / entry["folder"] / "history.png").is_file()
    bench = Path(__file__).resolve().parents[2] / "benchmarks" / "tune_throughput.py"
    run = subprocess.run([sys.executable, str(bench), str(daxpy_record), "--trials", "10", "--json"],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    figures = json.loads(run.stdout)
    assert figures["trials"] == 10 and figures["trials_per_minute"] > 0 and figures["mean_overhead_s"] >= 0
    print(f"tune throughput (10 trials): {figures['trials_per_minute']:.1f} trials/min, overhead "
          f"{figures['mean_overhead_s'] * 1e3:.1f} ms/trial beyond compile {figures['mean_compile_s'] * 1e3:.1f} ms "
          f"+ run {figures['mean_run_s'] * 1e3:.1f} ms")


def test_max_threads_bounds_on_the_gpu(daxpy_record, kir_cli):
    """`--max-threads-range` (issue 24 §3) on the GPU: the launch bounds' max threads
    below the recorded block are skipped before anything is compiled; the others are
    compiled with that .maxntid, launched and verified bit for bit."""
    record = Record.load(daxpy_record)
    threads = record.launch.block[0] * record.launch.block[1] * record.launch.block[2]
    out = kir_cli("tune", daxpy_record, "--preset", "compiler", "--fixed-passes", "default<O3>",
                  "--fixed-codegen-opt", "3", "--fixed-fp-contract", "auto", "--specialize-space", "on",
                  "--launch-bounds-space", "on", "--max-threads-range", "128:1024:128", "--sampler", "exhaustive",
                  "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    r = json.loads(out.stdout)["records"][0]
    below = [m for m in range(128, 1025, 128) if m < threads]
    assert r["skipped_counts"]["invalid"] == 3 * len(below)  # x 3 register caps
    assert {s["point"]["max_threads"] for s in r["skipped"]} == set(below)
    ran = r["trials"][1:]
    assert len(ran) == 3 * (8 - len(below))
    for t in r["trials"]:
        assert t["state"] == "complete" and t["result"]["verified"], t["result"]
        assert t["point"]["max_threads"] == 0 or t["point"]["max_threads"] >= threads
