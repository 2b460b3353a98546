"""`kir tune --results-dir DIR` (issue 24 §4, docs/tune.md "Results folder"): the
trials as JSONL and CSV, best, baseline, summary, Optuna's plots, and the per-trial
phases (compile, run, overhead) a throughput figure needs. No GPU: real studies over
tests/support/tune_fakes.py's executors (the record read and each variant resolved
for real, the time from its model); the files are checked against the study's
trials as `--json` reports them."""
from __future__ import annotations

import csv
import json

import pytest

import tune_fakes
from saxpy_record import saxpy, write_record  # noqa: F401  (the saxpy fixture)
from tune_fakes import cli

PNG = b"\x89PNG\r\n\x1a\n"
#: 3 blocks x 2 opt levels, exhaustively: 6 points and the first trial; the 32-thread
#: block "differs from the recording" in tune_fakes.model: pruned
SPACE = {"schema": "kir.tune-space/1", "block": [[256, 1, 1], [32, 1, 1], [128, 1, 1]], "opt_level": [2, 3],
         "codegen_opt": [3], "maxrregcount": [0], "specialize_args": [True]}


@pytest.fixture
def recordings(tmp_path, saxpy):  # noqa: F811
    """Two recordings of one record each (the same file name: two folders; the same
    launch, so one study in one run)."""
    for name in ("a", "b"):
        write_record(tmp_path / name, saxpy)
    space = tmp_path / "space.json"
    space.write_text(json.dumps(SPACE))
    return [tmp_path / "a", tmp_path / "b"], space


def _png(path):
    import matplotlib.image
    assert path.read_bytes()[:8] == PNG, path
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100, image.shape
    return image


def _csv(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _num(text):
    return None if text == "" else float(text)


def test_results_dir_agrees_with_the_study(recordings, tmp_path):
    (a, b), space = recordings
    out_dir = tmp_path / "results" / "deep"  # parents made
    run = cli("tune", a, "--space", space, "--sampler", "exhaustive", "--executor", "tune_fakes:modelled",
              "--results-dir", out_dir, "--json")
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["schema"] == "kir.tune-results/1" and len(summary["records"]) == 1
    assert [e["record"] for e in summary["records"]] == [r["record"] for r in out["records"]]
    config = json.loads((out_dir / "config.json").read_text())
    assert config["schema"] == "kir.tune-config/1" and config["sampler"] == "exhaustive"
    page = (out_dir / "index.html").read_text()
    for record, entry in zip(out["records"], summary["records"]):
        folder = out_dir / entry["folder"]
        trials = record["trials"]
        assert len(trials) == 7
        pruned = [t for t in trials if t["state"] == "pruned"]
        assert len(pruned) == 2 and all(t["point"]["block"] == [32, 1, 1] for t in pruned)
        # trials.jsonl: one line per trial, as --json says
        lines = [json.loads(line) for line in (folder / "trials.jsonl").read_text().splitlines()]
        assert [(t["number"], t["state"], t["value_ms"]) for t in lines] == \
            [(t["number"], t["state"], t["value_ms"]) for t in trials]
        assert [t["params"]["block"] for t in lines] == ["x".join(map(str, t["point"]["block"])) for t in trials]
        # trials.csv: one row per trial, the parameters flattened
        rows = _csv(folder / "trials.csv")
        assert [int(r["number"]) for r in rows] == [t["number"] for t in trials]
        assert [r["state"] for r in rows] == [t["state"] for t in trials]
        assert [r["error_kind"] for r in rows] == [t["result"]["error_kind"] or "" for t in trials]
        for row, t in zip(rows, trials):
            assert _num(row["median_ms"]) == t["result"]["median_ms"]
            assert row["opt_level"] == str(t["point"]["opt_level"]) and row["block"] == "x".join(map(str, t["point"]["block"]))
            assert _num(row["wall_s"]) == pytest.approx(t["phases"]["wall_s"])
        # best.json: the minimum of the completed trials' values
        best = json.loads((folder / "best.json").read_text())
        done = [r for r in rows if r["state"] == "complete"]
        least = min(done, key=lambda r: (float(r["value_ms"]), int(r["number"])))
        assert best["trial"] == int(least["number"]) == record["best"]["trial"]
        assert best["best_ms"] == float(least["value_ms"]) == min(
            tune_fakes.model(t["point"], 256)[1] for t in trials if t["state"] == "complete")
        assert best["speedup"] == pytest.approx(1.0 / best["best_ms"])  # the recorded code: 1.0 ms
        baseline = json.loads((folder / "baseline.json").read_text())
        assert baseline["value_ms"] == record["recorded"]["median_ms"] == 1.0
        assert json.loads((folder / "search_space.json").read_text()) == record["space"]
        assert entry["speedup"] == pytest.approx(best["speedup"]) and entry["complete"] == 5 and entry["pruned"] == 2
        _png(folder / "history.png")
        _png(folder / "importances.png")  # block and opt level vary among 5 completed trials
        assert entry["record"] in page and entry["folder"] in page
    _png(out_dir / "speedup.png")
    assert summary["throughput"]["trials"] == 7 and summary["throughput"]["trials_per_minute"] > 0


def test_results_dir_of_a_study_whose_trials_all_failed(recordings, tmp_path):
    (a, _), space = recordings
    run = cli("tune", a, "--space", space, "--trials", "3", "--executor", "tune_fakes:modelled",
              "--results-dir", tmp_path / "out", "--json", env={"TUNE_FAKE_ERROR": "1"})
    assert run.returncode == 1, run.stderr  # no verified trial
    (record,) = json.loads(run.stdout)["records"]
    (entry,) = json.loads((tmp_path / "out" / "summary.json").read_text())["records"]
    folder = tmp_path / "out" / entry["folder"]
    assert len(_csv(folder / "trials.csv")) == len(record["trials"]) == 3
    assert all(t["result"]["status"] == "error" for t in record["trials"])
    assert entry["best_ms"] is None and entry["speedup"] is None and entry["pruned"] == 3
    assert json.loads((folder / "best.json").read_text())["status"] == "none"
    _png(folder / "history.png")
    assert not (folder / "importances.png").exists()
    assert "2 completed trials" in entry["notes"]["importances"]
    assert "importances: parameter importances need 2 completed trials" in \
        (tmp_path / "out" / "index.html").read_text()
    _png(tmp_path / "out" / "speedup.png")


def test_html_embeds_the_pngs_or_optunas_plotly_figures(recordings, tmp_path):
    from kir.tune import Space, tune
    from kir.tune.results import write_results
    (a, b), space = recordings
    paths = [str(p) for d in (a, b) for p in (d / "records").glob("*.kirrec")]
    results = tune(paths, Space.from_dict(SPACE, "test"), 7, sampler="exhaustive", executor="tune_fakes:modelled")
    summary = write_results(results, tmp_path / "png", html="png")
    folders = [e["folder"] for e in summary["records"]]
    assert folders[1] == folders[0] + "-2" and all((tmp_path / "png" / f / "trials.csv").is_file() for f in folders)
    page = (tmp_path / "png" / "index.html").read_text()
    assert all(p in page for p in paths)
    # speed-up, and per record history and importances
    assert summary["html"] == "png" and page.count('<img alt="') == 5
    assert "plotly" not in page.lower()
    for row in results[0].outcome.rows:  # each trial in the page's table
        assert f"<tr><td>{row.number}</td><td>{row.state}</td>" in page
    pytest.importorskip("plotly")
    summary = write_results(results, tmp_path / "plotly", html="plotly")
    page = (tmp_path / "plotly" / "index.html").read_text()
    # Optuna's figures (history, importances per record) interactive; the speed-up chart a PNG
    assert summary["html"] == "plotly" and page.count("Plotly.newPlot(") == 4 and page.count("<img ") == 1
    assert page.count("plotly.js v") == 1  # plotly.js inline once: the page stands alone


def test_trial_phases_split_the_wall_time(recordings, tmp_path):
    """compile (what the trial's result says kir.jit took), run (the rest of the replay
    process's time: replay_seconds) and the overhead (the rest of Optuna's trial)."""
    (a, _), space = recordings
    run = cli("tune", a, "--space", space, "--trials", "4", "--executor", "tune_fakes:timed",
              "--results-dir", tmp_path / "out", "--json")
    assert run.returncode == 0, run.stderr
    (record,) = json.loads(run.stdout)["records"]
    timed = tune_fakes.TIMED
    for t in record["trials"]:
        p = t["phases"]
        repeated = t["result"].get("repeated")
        assert p["compile_s"] == (0.0 if repeated else timed["compile"])
        assert p["run_s"] == pytest.approx(0.0 if repeated else timed["replay"] - timed["compile"])
        assert p["wall_s"] >= t["seconds"] >= (0.0 if repeated else timed["replay"])
        assert p["overhead_s"] == pytest.approx(p["wall_s"] - p["compile_s"] - p["run_s"])
    (entry,) = json.loads((tmp_path / "out" / "summary.json").read_text())["records"]
    rate = entry["throughput"]
    assert record["throughput"] == rate  # --json's, the same
    finished = record["trials"]
    assert rate["trials"] == len(finished) == 4
    assert rate["mean_overhead_s"] == pytest.approx(sum(t["phases"]["overhead_s"] for t in finished) / 4)
    assert rate["trials_per_minute"] == pytest.approx(60 * 4 / rate["span_s"])
    assert rate["span_s"] >= sum(t["phases"]["wall_s"] for t in finished) - 1e-3  # one worker: trials in turn


def test_the_replay_process_times_its_trials(recordings):
    """kir.tune.trial.evaluate's result carries replay_seconds (the run phase), also
    when the trial fails."""
    from kir.tune.space import Space
    from kir.tune.trial import TrialProcess
    (a, _), _space = recordings
    path = str(next((a / "records").glob("*.kirrec")))
    with TrialProcess() as process:
        result = process.run(path + ".absent", Space.preset("standard").recorded())
    assert result["status"] == "error" and 0 < result["replay_seconds"] < 60


def test_a_results_dir_that_cannot_be_written_is_refused_before_any_trial(recordings, tmp_path):
    (a, _), space = recordings
    taken = tmp_path / "a-file"
    taken.write_text("")
    calls = tmp_path / "calls"
    run = cli("tune", a, "--space", space, "--executor", "tune_fakes:timed", "--results-dir", taken / "sub",
              "--json", env={"TUNE_FAKE_CALLS": str(calls)})
    assert run.returncode == 2 and run.stdout == "" and not calls.exists()  # not even the baseline ran
    assert run.stderr.strip().splitlines() == [f"kir: error: --results-dir {taken / 'sub'}: cannot write there "
                                               "(Not a directory)"]
