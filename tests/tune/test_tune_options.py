"""`kir tune`'s counterparts of Mneme's `mneme tune` options (issue 24 §3,
docs/tune.md "Mneme's options"): the space controls, samplers, metric, objective,
fail-fast, baseline-only, study name, --print-space / --dry-run / --config /
--dump-config. No GPU: trials run over tests/support/tune_fakes.py's executors
(the record read and each variant resolved for real, the time from its model)."""
from __future__ import annotations

import itertools
import json
import statistics

import pytest

import tune_fakes
from saxpy_record import saxpy, write_record  # noqa: F401  (the saxpy fixture)
from tune_fakes import cli


@pytest.fixture
def recording(tmp_path, saxpy):  # noqa: F811
    write_record(tmp_path / "rec", saxpy)
    return tmp_path / "rec"


def tune_json(*args, env=None) -> dict:
    result = cli("tune", *map(str, args), "--json", env=env)
    assert result.returncode in (0, 1), result.stderr
    return json.loads(result.stdout)


SMALL = ("--preset", "compiler", "--fixed-codegen-opt", "3", "--fixed-fp-contract", "auto", "--specialize-space", "on")


def test_print_space_applies_every_space_control(recording, tmp_path):
    pipelines = tmp_path / "pipelines.txt"
    pipelines.write_text("# candidates\nfunction(instcombine,newgvn)\n\ndefault<O1>\n")
    result = cli("tune", recording, "--preset", "full", "--passes", "default<O2>", "--pipeline-file", pipelines,
                 "--codegen-opt-range", "1:3:2", "--specialize-space", "off", "--specialize-dims-space", "on",
                 "--launch-bounds-space", "on-off", "--min-blocks-per-sm-range", "2:6:2", "--launch-dim", "none",
                 "--iterations", "7", "--warmup", "0", "--print-space")
    assert result.returncode == 0, result.stderr
    (entry,) = json.loads(result.stdout)["records"]
    space = entry["space"]
    assert space["pipeline"] == ["default<O2>", "function(instcombine,newgvn)", "default<O1>"]
    assert space["opt_level"] is None and space["codegen_opt"] == [1, 3]
    assert space["specialize_args"] == [False] and space["specialize_dims"] == [True]
    assert space["launch_bounds"] == [False, True] and space["min_blocks"] == [2, 4, 6]
    assert space["block"] == [[256, 1, 1]] and (space["repeat"], space["warmup"]) == (7, 0)
    assert space["maxrregcount"] == [0, 32, 64, 128, 255]  # the preset's, untouched
    assert space["fp_contract"] == ["auto", "fast", "on", "off"]  # the preset's, untouched
    # points: 3 pipelines x 2 codegen x 5 register caps x 4 contractions x (1 without bounds + 3 min blocks)
    assert space["points"] == 3 * 2 * 5 * 4 * 4
    assert entry["study"].startswith("kir-tune-")


@pytest.mark.parametrize("args, message", [
    (("--codegen-opt-range", "3:1"), "--codegen-opt-range '3:1': expected 0 <= LOW <= HIGH <= 3"),
    (("--codegen-opt-range", "1-3"), "--codegen-opt-range '1-3': expected LOW:HIGH[:STEP]"),
    (("--codegen-opt-range", "1:2", "--fixed-codegen-opt", "2"), "not with --codegen-opt-range"),
    (("--fixed-codegen-opt", "5"), "codegen_opt: 5 is not one of"),
    (("--passes", "nosuchpass"), "pipeline 'nosuchpass'"),
    (("--fixed-passes", "default<O2>", "--passes", "default<O1>"), "--fixed-passes: not with --passes"),
    (("--min-blocks-per-sm-range", "1:40"), "expected 0 <= LOW <= HIGH <= 32"),
    (("--timeout", "0"), "--timeout 0.0: expected a positive number"),
    (("--iterations", "0"), "repeat 0: expected an integer 1..100000"),
])
def test_bad_space_controls_exit_2(recording, args, message):
    result = cli("tune", recording, *args, "--print-space")
    assert result.returncode == 2, result.stdout
    assert message in result.stderr and "Traceback" not in result.stderr


def test_dry_run_shows_the_first_trial_and_runs_none(recording):
    # no --executor and no GPU here: a trial that ran would fail; dry-run runs none
    result = cli("tune", recording, *SMALL, "--sampler", "grid", "--metric", "min", "--dry-run", "--json")
    assert result.returncode == 0, result.stderr
    (entry,) = json.loads(result.stdout)["records"]
    assert entry["first_trial"] == {"opt_level": "3", "maxrregcount": "0"}
    assert entry["grid"] == {"opt_level": ["1", "2", "3"], "maxrregcount": ["0", "64", "128"]}
    assert (entry["sampler"], entry["metric"], entry["objective"]) == ("grid", "min", "time")


def test_dump_config_then_config_is_the_same_run(recording, tmp_path):
    config = tmp_path / "tune.json"
    result = cli("tune", recording, *SMALL, "--sampler", "random", "--metric", "max", "--trials", "5",
                 "--study-name", "mine", "--dump-config", config)
    assert result.returncode == 0, result.stderr
    data = json.loads(config.read_text())
    assert data["schema"] == "kir.tune-config/1" and data["sampler"] == "random" and data["trials"] == 5
    assert "records" not in data
    dumped = cli("tune", recording, *SMALL, "--sampler", "random", "--metric", "max", "--trials", "5", "--dry-run",
                 "--json", "--study-name", "mine")
    loaded = cli("tune", recording, "--config", config, "--dry-run", "--json")
    assert loaded.returncode == 0, loaded.stderr
    a, b = json.loads(dumped.stdout)["records"][0], json.loads(loaded.stdout)["records"][0]
    assert a["space"]["points"] == b["space"]["points"] == 9
    assert {k: v for k, v in a.items() if k != "space"} == {k: v for k, v in b.items() if k != "space"}
    assert b["study"].startswith("mine-") and b["trials"] == 5
    # the command line wins over the file
    over = json.loads(cli("tune", recording, "--config", config, "--sampler", "tpe", "--dry-run",
                          "--json").stdout)["records"][0]
    assert over["sampler"] == "tpe" and over["metric"] == "max"
    config.write_text(json.dumps({"no_such_option": 1}))
    bad = cli("tune", recording, "--config", config, "--print-space")
    assert bad.returncode == 2 and "unknown option 'no_such_option'" in bad.stderr


def test_exhaustive_runs_every_point_of_the_grid_once(recording):
    out = tune_json(recording, *SMALL, "--sampler", "exhaustive", "--executor", "tune_fakes:modelled")
    (r,) = out["records"]
    points = [(t["point"]["opt_level"], t["point"]["maxrregcount"]) for t in r["trials"]]
    assert points[0] == (3, 0)  # the first trial: kir.jit's defaults
    assert sorted(points[1:]) == sorted(itertools.product([1, 2, 3], [0, 64, 128]))
    best = min(tune_fakes.model(t["point"], 256)[1] for t in r["trials"])
    assert r["best"]["median_ms"] == best


@pytest.mark.parametrize("sampler", ["random", "grid", "cmaes", "tpe"])
def test_each_sampler_searches_the_space(recording, sampler):
    pytest.importorskip("cmaes") if sampler == "cmaes" else None
    runs = [tune_json(recording, "--preset", "compiler", "--sampler", sampler, "--trials", "8", "--seed", "4",
                      "--executor", "tune_fakes:modelled")["records"][0] for _ in range(2)]
    for r in runs:
        assert len(r["trials"]) == 8 and r["trials"][0]["point"]["opt_level"] == 3
        assert r["best"]["median_ms"] == min(t["result"]["median_ms"] for t in r["trials"])
        points = {json.dumps(t["point"], sort_keys=True) for t in r["trials"]}
        assert len(points) > 1
    # a seed repeats the search, whatever the sampler
    assert [t["point"] for t in runs[0]["trials"]] == [t["point"] for t in runs[1]["trials"]]


@pytest.mark.parametrize("metric, stat", [("min", min), ("max", max), ("mean", statistics.fmean),
                                          ("median", statistics.median)])
def test_the_metric_ranks_trials(recording, metric, stat):
    r = tune_json(recording, *SMALL, "--sampler", "exhaustive", "--metric", metric,
                  "--executor", "tune_fakes:spread")["records"][0]
    for t in r["trials"]:
        if t["state"] == "complete":
            assert t["value_ms"] == pytest.approx(stat(t["result"]["times_ms"]))
    assert r["recorded"]["value_ms"] == pytest.approx(stat([0.5, 1.0, 3.0]))
    best = min((t for t in r["trials"] if t["state"] == "complete"), key=lambda t: (t["value_ms"], t["number"]))
    assert r["best"]["trial"] == best["number"] and r["best"]["median_ms"] == pytest.approx(best["value_ms"])


def test_objective_speedup_maximizes_the_same_winner(recording):
    time = tune_json(recording, *SMALL, "--sampler", "exhaustive", "--executor", "tune_fakes:modelled")
    speed = tune_json(recording, *SMALL, "--sampler", "exhaustive", "--objective", "speedup",
                      "--executor", "tune_fakes:modelled")
    assert speed["records"][0]["best"]["trial"] == time["records"][0]["best"]["trial"]
    assert speed["records"][0]["best"]["speedup"] == pytest.approx(1.0 / time["records"][0]["best"]["median_ms"])


def test_fail_fast_stops_at_the_first_error(recording):
    env = {"TUNE_FAKE_ERROR": "1"}
    going = tune_json(recording, *SMALL, "--trials", "4", "--executor", "tune_fakes:modelled", env=env)
    fast = tune_json(recording, *SMALL, "--trials", "4", "--fail-fast", "--executor", "tune_fakes:modelled",
                     env=env)
    assert len(going["records"][0]["trials"]) == 4 and len(fast["records"][0]["trials"]) == 1
    assert fast["records"][0]["trials"][0]["result"]["status"] == "error"
    assert fast["exit_status"] == 1


def test_baseline_only_measures_the_recorded_code(recording, tmp_path):
    out = tune_json(recording, "--baseline-only", "--sampler", "exhaustive", "--study-name", "base", "--storage",
                    f"journal:{tmp_path / 'j.log'}", "--executor", "tune_fakes:modelled")
    (r,) = out["records"]
    assert r["trials"] == [] and r["recorded"]["median_ms"] == 1.0 and r["study"].startswith("base-")
    assert "base-" in (tmp_path / "j.log").read_text()


# --- typed trial errors (issue 24 §3) --------------------------------------------------------

def test_trial_errors_are_typed(recording):
    """error_kind says what failed, so a driver does not read messages: a record
    that is not there, and (without a GPU) the device, are "load" errors."""
    from kir.tune.space import Space
    from kir.tune.trial import ERROR_KINDS, TrialProcess
    path = str(next((recording / "records").glob("*.kirrec")))
    with TrialProcess() as process:
        missing = process.run(path + ".absent", Space.preset("standard").recorded())
        assert (missing["status"], missing["error_kind"]) == ("error", "load"), missing
        result = process.run(path, Space.preset("standard").recorded())
    if result["status"] == "ok":
        pytest.skip("a GPU is present: tests/tune/test_tune_gpu.py covers it")
    assert result["error_kind"] == "load" and result["error_kind"] in ERROR_KINDS, result


def test_a_trial_past_its_timeout_is_killed_and_typed(recording, monkeypatch):
    """--trial-timeout: the trial's process is killed, its result an error of kind
    "timeout", and the next trial gets a fresh process. The child here is a
    stand-in that never answers (a hung kernel)."""
    import time

    import kir.tune.trial as trial
    monkeypatch.setattr(trial, "CHILD", "import time\ntime.sleep(600)\n")
    process = trial.TrialProcess(timeout=1.0)
    start = time.monotonic()
    result = process.run(str(recording), {"recorded": True})
    assert time.monotonic() - start < 30
    assert (result["status"], result["error_kind"]) == ("error", "timeout") and "1 s" in result["error"]
    assert process.proc is None
    process.close()



# --- a record without LLVM IR (issue 24 §3) ------------------------------------------------

def test_a_record_without_ir_tunes_its_launch_configuration(tmp_path, saxpy):  # noqa: F811
    """An nvcc build's record has no IR to compile: every trial used to fail. Its
    launch configuration is tuned instead, with the recorded code, said before the
    first trial; the best block is a suggestion, nothing is handed off."""
    write_record(tmp_path / "rec", saxpy, ir=False)
    result = cli("tune", tmp_path / "rec", "--preset", "compiler", "--trials", "6", "--seed", "1",
                 "--executor", "tune_fakes:modelled", "--json")
    assert result.returncode == 0, result.stderr
    assert "has no LLVM IR (an nvcc build): tuning its launch configuration only" in result.stderr
    (r,) = json.loads(result.stdout)["records"]
    assert r["space"]["block"][0] == [256, 1, 1] and len(r["space"]["block"]) > 1  # "recorded" became "auto"
    assert r["space"]["maxrregcount"] == [0] and r["space"]["specialize_args"] == [False]
    assert all(t["point"]["recorded_code"] for t in r["trials"]) and len(r["trials"]) == 6
    assert all(t["state"] == "complete" or t["result"]["status"] == "mismatch" for t in r["trials"])
    assert {tuple(t["point"]["block"]) for t in r["trials"]} != {(256, 1, 1)}
    assert all(t["description"].endswith("the recorded code") for t in r["trials"])
    assert r["best"] is not None and r["handoff"]["trial"] is None
    space = json.loads(cli("tune", tmp_path / "rec", "--print-space").stdout)["records"][0]
    assert space["launch_only"] and space["space"]["opt_level"] == [3]
