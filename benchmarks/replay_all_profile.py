"""Where `kir replay --all` spends its time per record, in one process on one GPU (issue
28: the fixed cost of a record against its kernel's own time): records the fixture apps
(benchmarks/replay_all.py's recording), then runs `kir replay --all DIR` under cProfile
and prints the rate, the sum of the records' own replay times (their median_ms), and the
functions that take the time.

    python benchmarks/replay_all_profile.py [--dir REC]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import tempfile
import time
from contextlib import redirect_stdout
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kir.cli import main  # noqa: E402
from replay_all import make_recording  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--dir", type=Path)
args = parser.parse_args()
with tempfile.TemporaryDirectory(prefix="kir-replay-profile-") as work:
    directory = args.dir or make_recording(Path(work) / "rec")
    main(["replay", "--all", str(directory), "--json"])  # warm: the driver, the imports
    out = io.StringIO()
    profile = cProfile.Profile()
    start = time.perf_counter()
    with redirect_stdout(out):
        profile.runcall(main, ["replay", "--all", str(directory), "--json"])
    wall = time.perf_counter() - start
    report = json.loads(out.getvalue())
    rows = report["records"]
    own = sum(r["median_ms"] or 0 for r in rows) / 1e3
    print(f"{len(rows)} records in {wall:.2f} s ({len(rows) / wall * 60:.0f}/min under cProfile); "
          f"their own replay times sum to {own * 1e3:.1f} ms; statuses "
          f"{ {s: sum(r['status'] == s for r in rows) for s in ('passed', 'failed', 'error')} }")
    stats = pstats.Stats(profile)
    stats.sort_stats("cumulative").print_stats(30)
    stats.sort_stats("tottime").print_stats(20)
