"""A tuning run's results folder (`kir tune --results-dir DIR`, issue 24 §4), laid out as
Mneme's (python/mneme/tuning/result_store.py, ResultStore: config.json,
search_space.json, baseline.json, trials.jsonl, best.json, summary.json; written by
TuningSession._write_final_outputs, session.py), one folder per record since kir
tunes several records in one run, with CSV tables and plots beside:

    DIR/config.json               the options (`kir tune`: --dump-config's object)
    DIR/summary.json, summary.csv one entry per record: baseline, best, speed-up,
                                  trial counts, throughput (trials/min, phases)
    DIR/speedup.png               speed-up of the best trial per record (matplotlib)
    DIR/index.html                the tables and plots in one page
    DIR/<record>/trials.jsonl     one trial a line (TrialRow.to_json, its flattened
                                  parameters, speed-up)
    DIR/<record>/trials.csv       one trial a row (CSV_COLUMNS, then the parameters)
    DIR/<record>/best.json, baseline.json, search_space.json, summary.json
    DIR/<record>/history.png      optuna.visualization.matplotlib.plot_optimization_history
    DIR/<record>/importances.png  ...plot_param_importances (>= 2 completed trials whose
                                  parameters vary; else skipped, said in summary.json)

The plots are Optuna's own, drawn from a study rebuilt from the trials (their
parameters: the points flattened, each a categorical), so that a study kept only
in memory, or one of several workers, plots the same. index.html embeds Optuna's
plotly figures when plotly is importable (interactive; plotly.js inline, so the
page stands alone), else the PNGs (base64).
"""
from __future__ import annotations

import base64
import csv
import html as htmlmod
import json
import math
import re
import warnings
from pathlib import Path

from kir.envelope import envelope
from kir.errors import OptionError, missing_extra
from kir.tune.study import speedup, throughput

__all__ = ["CSV_COLUMNS", "SCHEMA", "flatten", "make_results_dir", "write_results"]

SCHEMA = "kir.tune-results/1"
#: trials.csv's first columns; the point's flattened parameters follow (flatten)
CSV_COLUMNS = ("number", "state", "status", "error_kind", "value_ms", "median_ms", "speedup", "registers",
               "spill_stores", "spill_loads", "compile_s", "run_s", "overhead_s", "wall_s")
RECORD_COLUMNS = ("record", "folder", "kernel", "trials", "complete", "pruned", "baseline_ms", "best_ms",
                  "best_trial", "speedup", "handoff_trial", "handoff_stored", "trials_per_minute", "mean_overhead_s")


def flatten(point: dict | None) -> dict:
    """A point's parameters as scalars: block and grid "XxYxZ", nested objects
    (the tolerance) as "key.sub"."""
    out: dict = {}

    def put(prefix: str, value) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                put(f"{prefix}.{k}" if prefix else k, v)
        elif isinstance(value, (list, tuple)):
            out[prefix] = "x".join(map(str, value))
        else:
            out[prefix] = value
    put("", point or {})
    return out


def make_results_dir(directory) -> Path:
    """`directory` made (parents too) and writable, else OptionError naming it, and
    matplotlib importable (else kir's missing-extra error): `kir tune` checks both before
    the first trial, so that a long run does not fail at its end."""
    _pyplot()
    root = Path(directory)
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / ".kir-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise OptionError(f"--results-dir {directory}: cannot write there ({error.strerror or error})") from None
    return root


def write_results(results, directory, *, config: dict | None = None, html: str = "auto") -> dict:
    """Write `results` (kir.tune.tune's RecordTunings) to `directory` (made, parents
    too; files there are replaced) and return the summary (summary.json's object).
    `config`: written as config.json; `html`: "plotly" (Optuna's plotly figures:
    needs plotly), "png" (the PNGs embedded) or "auto" (plotly when importable)."""
    plt = _pyplot()
    plotly = _plotly(html)
    root = make_results_dir(directory)
    if config is not None:
        _write_json(root / "config.json", config)
    entries, pages, folders = [], [], set()
    for r in results:
        folder = _folder(r.outcome.path, folders)
        entry, page = _write_record(r, root / folder, plt, plotly)
        entries.append(entry | {"folder": folder})
        pages.append((entry | {"folder": folder}, page))
    rows = [row for r in results for row in r.outcome.rows]
    summary = envelope(SCHEMA, records=entries, throughput=throughput(rows), html="plotly" if plotly else "png")
    _write_json(root / "summary.json", summary)
    _write_csv(root / "summary.csv", RECORD_COLUMNS, [{k: e.get(k) for k in RECORD_COLUMNS} for e in entries])
    _speedup_chart(plt, entries, root / "speedup.png")
    (root / "index.html").write_text(_page(summary, pages, root, plotly))
    return summary


def _pyplot():
    try:
        import matplotlib
    except ImportError as error:
        raise missing_extra("matplotlib", "tune", "kir tune --results-dir", error) from None
    matplotlib.use("Agg")  # files only: no display
    import matplotlib.pyplot as plt
    return plt


def _plotly(html: str) -> bool:
    if html not in ("auto", "plotly", "png"):
        raise OptionError(f"html {html!r}: expected auto, plotly or png")
    if html == "png":
        return False
    try:
        import plotly  # noqa: F401
    except ImportError as error:
        if html == "plotly":
            raise missing_extra("plotly", "tune", "kir tune --results-dir (plotly pages)", error) from None
        return False
    return True


def _folder(path: str, taken: set) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]", "_", Path(path).name.removesuffix(".kirrec")) or "record"
    name, n = stem, 2
    while name in taken:
        name, n = f"{stem}-{n}", n + 1
    taken.add(name)
    return name


def _write_json(path: Path, data) -> None:
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")


def _write_csv(path: Path, columns, rows: list[dict]) -> None:
    with open(path, "w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(columns), extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if v is None else v for k, v in row.items()})


def _trial_row(row, recorded_ms) -> dict:
    res, ph = row.result, row.phases or {}
    return {"number": row.number, "state": row.state, "status": res.get("status"), "error_kind": res.get("error_kind"),
            "value_ms": row.value_ms, "median_ms": res.get("median_ms"), "speedup": speedup(recorded_ms, row.ms),
            "registers": res.get("registers"), "spill_stores": res.get("spill_stores"),
            "spill_loads": res.get("spill_loads"), "compile_s": ph.get("compile_s", res.get("compile_seconds")),
            "run_s": ph.get("run_s"), "overhead_s": ph.get("overhead_s"), "wall_s": ph.get("wall_s")}


def _write_record(r, folder: Path, plt, plotly: bool) -> tuple[dict, dict]:
    o = r.outcome
    folder.mkdir(parents=True, exist_ok=True)
    for stale in ("history.png", "importances.png"):  # an earlier run's, where this one draws none
        (folder / stale).unlink(missing_ok=True)
    recorded_ms = o.recorded_ms
    flat = {row.number: flatten(row.point.to_json() if row.point else None) for row in o.rows}
    params = list(dict.fromkeys(k for f in flat.values() for k in f))
    with open(folder / "trials.jsonl", "w") as out:
        for row in o.rows:
            out.write(json.dumps(row.to_json() | {"params": flat[row.number], "baseline_ms": recorded_ms,
                                                  "speedup": speedup(recorded_ms, row.ms)},
                                 sort_keys=True, default=str) + "\n")
    table = [_trial_row(row, recorded_ms) | flat[row.number] for row in o.rows]
    _write_csv(folder / "trials.csv", CSV_COLUMNS + tuple(params), table)
    _write_json(folder / "baseline.json", {"point": "recorded", "value_ms": recorded_ms, "result": o.recorded})
    _write_json(folder / "search_space.json", o.space)
    best = o.best()
    record = {"path": o.path, "kernel": o.record.kernel.name, "demangled": o.record.kernel.demangled,
              "static_hash": o.record.kernel.static_hash, "study": o.study, "arch": o.arch}
    handoffs = [h.to_json() for h in r.handoffs]
    if best is None:
        _write_json(folder / "best.json", {"status": "none", "reason": "no verified trial", "record": record,
                                           "baseline_ms": recorded_ms, "handoffs": handoffs})
    else:
        _write_json(folder / "best.json", {"status": "success", "trial": best.number, "best_ms": best.ms,
                                           "baseline_ms": recorded_ms, "speedup": speedup(recorded_ms, best.ms),
                                           "params": flat[best.number], "point": best.point.to_json(),
                                           "description": best.point.describe(), "result": best.result,
                                           "record": record, "handoffs": handoffs})
    counts: dict = {}
    for row in o.rows:
        counts[row.state] = counts.get(row.state, 0) + 1
    kinds: dict = {}
    for row in o.rows:
        if row.result.get("error_kind"):
            kinds[row.result["error_kind"]] = kinds.get(row.result["error_kind"], 0) + 1
    study = _study(o.rows, flat)
    plots, notes = {}, {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Optuna's "experimental" and matplotlib's empty-legend warnings
        figures = _plots(study, folder, plt, plotly, plots, notes)
    rate = throughput(o.rows)
    handoff = r.handoff
    entry = {"record": o.path, "kernel": o.record.kernel.demangled or o.record.kernel.name, "study": o.study,
             "trials": len(o.rows), "complete": counts.get("complete", 0), "pruned": counts.get("pruned", 0),
             "states": counts, "error_kinds": kinds, "baseline_ms": recorded_ms,
             "best_ms": best.ms if best else None, "best_trial": best.number if best else None,
             "speedup": speedup(recorded_ms, best.ms) if best else None,
             "handoff_trial": handoff.row.number if handoff.row else None, "handoff_stored": handoff.stored,
             "trials_per_minute": rate["trials_per_minute"], "mean_overhead_s": rate["mean_overhead_s"],
             "throughput": rate, "plots": sorted(p.name for p in plots.values()), "notes": notes,
             "warnings": list(r.warnings)}
    _write_json(folder / "summary.json", entry)
    return entry, {"table": table, "params": params, "plots": plots, "figures": figures}


def _plots(study, folder: Path, plt, plotly: bool, plots: dict, notes: dict) -> dict:
    """history.png and importances.png of `study` into `plots` (or why not into `notes`);
    the plotly figures of them for the page when `plotly`."""
    if study is not None:
        from optuna.visualization import matplotlib as optuna_plt
        plots["history"] = _save(plt, optuna_plt.plot_optimization_history(study, target_name="time (ms)"),
                                 folder / "history.png")
        why = _no_importances(study)
        if why is None:
            plots["importances"] = _save(plt, optuna_plt.plot_param_importances(study, evaluator=_evaluator(),
                                                                                target_name="time (ms)"),
                                         folder / "importances.png")
        else:
            notes["importances"] = why
    else:
        notes["history"] = notes["importances"] = "no finished trial"
    figures = {}
    if plotly and study is not None:
        import optuna.visualization as optuna_plotly
        figures["history"] = optuna_plotly.plot_optimization_history(study, target_name="time (ms)")
        if "importances" in plots:
            figures["importances"] = optuna_plotly.plot_param_importances(study, evaluator=_evaluator(),
                                                                          target_name="time (ms)")
    return figures


def _study(rows, flat: dict):
    """An in-memory Optuna study of `rows`: each finished trial with the parameters
    that vary among them (categoricals), its value the time (None: pruned)."""
    import optuna
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # quiet, as kir.tune.study keeps it
    finished = [r for r in rows if r.state in ("complete", "pruned", "fail")]
    if not finished:
        return None
    choices: dict = {}
    for r in finished:
        for k, v in flat[r.number].items():
            if isinstance(v, (bool, int, float, str)) or v is None:
                choices.setdefault(k, [])
                if v not in choices[k]:
                    choices[k].append(v)
    varying = {k: c for k, c in choices.items() if len(c) > 1 and all(k in flat[r.number] for r in finished)}
    dists = {k: optuna.distributions.CategoricalDistribution(c) for k, c in varying.items()}
    study = optuna.create_study(direction="minimize", study_name="kir-tune-results")
    states = optuna.trial.TrialState
    for r in finished:
        state = states.COMPLETE if r.ms is not None else states.PRUNED if r.state != "fail" else states.FAIL
        study.add_trial(optuna.trial.create_trial(params={k: flat[r.number][k] for k in varying}, distributions=dists,
                                                  value=r.ms, state=state))
    return study


def _no_importances(study) -> str | None:
    import optuna
    done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    if len(done) < 2:
        return f"parameter importances need 2 completed trials; the study has {len(done)}"
    if not any(len({repr(t.params.get(k)) for t in done}) > 1 for k in done[0].distributions):
        return "parameter importances need parameters that vary among the completed trials"
    return None


def _evaluator():
    """Optuna's PED-ANOVA importance evaluator: Optuna 5's default, its own code (Optuna 4's
    default, fANOVA, needs scikit-learn)."""
    import optuna
    return optuna.importance.PedAnovaImportanceEvaluator()


def _save(plt, axes, path: Path) -> Path:
    figure = axes.figure if hasattr(axes, "figure") else axes.flat[0].figure
    figure.set_size_inches(8, 5)
    figure.tight_layout()
    figure.savefig(path, format="png", dpi=100)
    plt.close(figure)
    return path


def _speedup_chart(plt, entries: list[dict], path: Path) -> None:
    """A bar per record: the best trial's speed-up over the recorded code (none: 0,
    labelled), numbered as summary.json's records, named by kernel and folder."""
    with plt.style.context("default"):
        figure, axes = plt.subplots(figsize=(8, 1.5 + 0.45 * max(1, len(entries))))
        names = [f"{i + 1}. {(e['kernel'] or '?').split('(')[0][:32]} [{e['folder'][:8]}]"
                 for i, e in enumerate(entries)]
        values = [e["speedup"] or 0.0 for e in entries]
        rows = range(len(entries))
        bars = axes.barh(rows, values, color=["tab:green" if v >= 1 else "tab:red" for v in values])
        for bar, e in zip(bars, entries):
            label = " none" if e["speedup"] is None else f" {e['speedup']:.2f}x"
            axes.annotate(label, (bar.get_width(), bar.get_y() + bar.get_height() / 2), va="center")
        axes.axvline(1.0, color="gray", linestyle="--", linewidth=1)
        axes.set_yticks(rows, names)
        axes.invert_yaxis()
        axes.set_xlim(0, max(values + [1.0]) * 1.2)
        axes.set_xlabel("speed-up of the best trial over the recorded code")
        axes.set_title("Speed-up per record")
        figure.tight_layout()
        figure.savefig(path, format="png", dpi=100)
        plt.close(figure)


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}" if math.isfinite(value) else str(value)
    return htmlmod.escape(str(value))


def _table(columns, rows: list[dict]) -> str:
    head = "".join(f"<th>{htmlmod.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_cell(row.get(c))}</td>" for c in columns) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _png(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{htmlmod.escape(alt)}" src="data:image/png;base64,{data}">'


def _page(summary: dict, pages, root: Path, plotly: bool) -> str:
    parts = ["<!DOCTYPE html><html><head><meta charset='utf-8'><title>kir tune results</title><style>"
             "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:90%}"
             "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}</style></head><body>",
             "<h1>kir tune results</h1>", _table(RECORD_COLUMNS, summary["records"]),
             "<p>Throughput: " + htmlmod.escape(json.dumps(summary["throughput"])) + "</p>",
             _png(root / "speedup.png", "speed-up per record")]
    first = True
    for entry, page in pages:
        parts.append(f"<h2>{htmlmod.escape(entry['folder'])}: {htmlmod.escape(entry['kernel'] or '')}</h2>")
        parts.append(f"<p>record {htmlmod.escape(entry['record'])}, study {htmlmod.escape(entry['study'])}; "
                     f"baseline {_cell(entry['baseline_ms'])} ms, best {_cell(entry['best_ms'])} ms "
                     f"(trial {_cell(entry['best_trial'])}, speed-up {_cell(entry['speedup'])})</p>")
        for name in ("history", "importances"):
            if plotly and name in page["figures"]:
                parts.append(page["figures"][name].to_html(full_html=False, include_plotlyjs=first))
                first = False
            elif name in page["plots"]:
                parts.append(_png(page["plots"][name], f"{entry['folder']} {name}"))
            elif name in entry["notes"]:
                parts.append(f"<p>{name}: {htmlmod.escape(entry['notes'][name])}</p>")
        parts.append(_table(CSV_COLUMNS + tuple(page["params"]), page["table"]))
    parts.append("</body></html>")
    return "\n".join(parts)

