"""How replayed launches are timed (Variant.timing, `kir replay --timing`, a tune space's
"timing"): the values and their errors, and "activity" (kir.replay.activity: CUPTI's
kernel records through cupti-python, the `timing` extra) — its install hint when the
module is missing (a fresh interpreter where `cupti` is unimportable), and on a GPU the
kernel-only times of a real replayed saxpy against the CUDA events of the same launches."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kir.errors import OptionError
from kir.replay import Variant
from kir.replay.variant import TIMINGS
from kir.tune.space import Space
from running import run_kir
from saxpy_record import SAXPY, saxpy, write_record  # noqa: F401  (saxpy: fixture)

TESTS = Path(__file__).resolve().parents[1] / "support"  # the rigs a child imports


def without_cupti(argv: list[str]) -> subprocess.CompletedProcess:
    """`kir ARGV` in a fresh interpreter where cupti-python is not importable."""
    probe = ("import sys\nsys.modules['cupti'] = None  # as if cupti-python were not installed\n"
             f"from kir.cli import main\nsys.exit(main({[str(a) for a in argv]!r}))\n")
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(TESTS), "PATH": "/usr/bin:/bin"})


def test_the_timings():
    assert TIMINGS == ("each", "graph", "activity")
    assert Variant(timing="activity").timing == "activity"
    assert Space.from_dict({"timing": "activity"}, "space.json").timing == "activity"


@pytest.mark.parametrize("value", ["wall", "Activity", "", None, 1])
def test_a_bad_timing_is_named(value):
    with pytest.raises(OptionError) as error:
        Variant(timing=value)
    assert str(error.value) == f"timing {value!r}: expected each, graph or activity"
    with pytest.raises(OptionError) as error:
        Space.from_dict({"timing": value}, "space.json")
    assert str(error.value) == f"space.json: timing {value!r}: expected each, graph or activity"


def test_the_cli_refuses_a_bad_timing(tmp_path, saxpy):
    record = write_record(tmp_path, saxpy)
    result = run_kir("replay", record.path, "--timing", "cupti")
    assert result.returncode == 2, result.stdout
    [line] = [x for x in result.stderr.splitlines() if "invalid choice" in x]
    assert line.startswith("kir replay: error: argument --timing: invalid choice: 'cupti' (choose from ")
    assert [t in line for t in TIMINGS] == [True] * 3, line
    assert "Traceback" not in result.stderr


def test_the_cli_offers_activity_and_plans_it_without_cupti(tmp_path, saxpy):
    """--timing activity is a variant option; --plan needs no GPU and no cupti."""
    record = write_record(tmp_path, saxpy)
    assert "activity" in run_kir("replay", "--help").stdout
    plan = without_cupti(["replay", "--plan", "--json", "--timing", "activity", record.path])
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["variant"]["description"] == "as recorded"


def test_replay_without_cupti_names_the_extra(tmp_path, saxpy):
    """One line naming the `timing` extra, exit 2, before the GPU is opened (so here too)."""
    from kir.errors import install_hint
    record = write_record(tmp_path, saxpy)
    result = without_cupti(["replay", "--timing", "activity", record.path])
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr == (f"kir: error: kir replay --timing activity: cupti-python is not installed: "
                             f"{install_hint('timing')} (import of cupti halted; None in sys.modules)\n")


def test_tune_without_cupti_names_the_extra_before_any_trial(tmp_path, saxpy):
    pytest.importorskip("optuna")
    from kir.errors import install_hint
    record = write_record(tmp_path, saxpy)
    space = tmp_path / "space.json"
    space.write_text(json.dumps({"preset": "quick", "timing": "activity"}))
    result = without_cupti(["tune", record.path, "--space", space, "--trials", "2",
                            "--storage", f"journal:{tmp_path / 'j'}"])
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.endswith(f"kir: error: kir tune (the space's timing activity): cupti-python is not "
                                  f"installed: {install_hint('timing')} (import of cupti halted; None in "
                                  "sys.modules)\n"), result.stderr
    assert not (tmp_path / "j").exists()  # no study was opened


# --- on a GPU (cupti-python installed: pip install '<dist>[timing]') ------------------

@pytest.fixture
def cupti_record(gpu, tmp_path, saxpy):
    pytest.importorskip("cupti", reason="cupti-python is not installed (the timing extra)")
    return write_record(tmp_path / "rec", saxpy)


def test_activity_times_a_replayed_kernel(cupti_record):
    """Each timed launch's CUPTI kernel record(s), exactly `repeat` a round (rounds in
    one Replayer, the recorded code and code compiled from the IR alike): the kernel's
    time is positive and within the CUDA events of the same launch (which add the
    launch latency); the output verifies."""
    from kir.replay import Replayer
    repeat = 7
    variants = [Variant(repeat=repeat, timing="activity"), Variant(repeat=repeat, timing="activity"),
                Variant(repeat=repeat, timing="activity", options={"opt_level": 2}, name="O2")]
    with Replayer(cupti_record) as replayer:
        results = [replayer.run(v) for v in variants]
        events = replayer.run(Variant(repeat=repeat))
    for r in results:
        assert r.verified and r.timing == "activity", r.mismatches
        assert r.kernel_records == repeat and len(r.times_ms) == len(r.event_times_ms) == repeat
        for kernel, event in zip(r.times_ms, r.event_times_ms):
            assert 0 < kernel <= event + 0.002, (kernel, event)  # 2 us: the events' resolution and more
    assert results[2].compiled and not results[0].compiled
    print(f"saxpy {SAXPY}: kernel {results[0].median_ms * 1e3:.2f} us (CUPTI), "
          f"{events.median_ms * 1e3:.2f} us between events")
    assert results[0].median_ms < events.median_ms


def test_kir_replay_timing_activity(cupti_record):
    result = run_kir("replay", cupti_record.path, "--timing", "activity", "--repeat", "5", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    v = json.loads(result.stdout)["variant_result"]
    assert v["timing"] == "activity" and v["kernel_records"] == 5 and v["verified"]
    assert all(0 < t <= e + 0.002 for t, e in zip(v["times_ms"], v["event_times_ms"])), v
