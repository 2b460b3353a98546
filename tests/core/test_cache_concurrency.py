"""The cache under 8 concurrent writer processes (as 8 MPI ranks sharing one cache
directory) storing the same 24 keys, each with an entry of its own, and a reader
process looking every key up from fresh handles the whole time: every answer is a
miss or exactly one writer's entry (code, metadata), no lookup meets a damaged
file, and afterwards every entry verifies, no temporary is left behind, and each
key holds one writer's whole entry. Run twice: unbounded, and with max_bytes small
enough that eviction runs in every writer while the others write and read."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import cache_reference as ref
from cache_worker import KEYS, WRITERS, code_of, meta_of
from kir.cache import Cache

WORKER = Path(__file__).resolve().parents[1] / "support" / "cache_worker.py"


@pytest.mark.parametrize("bounded", [False, True], ids=["unbounded", "evicting"])
def test_eight_writers_and_a_reader(built, tmp_path, bounded):
    cubin = built["kernels_sm90.cubin"]
    base = cubin.read_bytes()
    directory = tmp_path / "cache"
    # Evicting: room for about a third of the keys' entries.
    max_bytes = (len(base) + 4096) * len(KEYS) // 3 if bounded else 0
    reader = subprocess.Popen([sys.executable, str(WORKER), "read", str(directory), "6", str(cubin)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    writers = [subprocess.Popen([sys.executable, str(WORKER), "write", str(directory), str(w), "6",
                                 str(max_bytes), str(cubin)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True) for w in range(WRITERS)]
    stats = []
    for w in writers:
        out, err = w.communicate(timeout=300)
        assert w.returncode == 0, err[-3000:]
        stats.append(json.loads(out))
    out, err = reader.communicate(timeout=300)
    assert reader.returncode == 0, out + err[-3000:]
    counts = json.loads(out)
    assert counts["hits"] > 0 and counts["errors"] == 0 and not counts["wrong"], counts
    assert sum(s["stores"] for s in stats) == WRITERS * 6 * len(KEYS)
    assert all(s["errors"] == 0 for s in stats)

    cache = Cache(directory)
    assert cache.verify() == []  # every entry intact, no stale temporary, nothing stray
    assert not list(directory.rglob(".tmp-*"))
    files = [p for p in directory.rglob("*") if p.is_file()]
    entries = cache.entries()
    assert len(entries) == len(files)
    for entry in entries:
        writer = int(entry.meta["writer"])
        assert entry.code == code_of(base, entry.key, writer) and entry.meta == meta_of(entry.key, writer)
        assert ref.decode((directory / entry.key[:2] / entry.key).read_bytes())["code"] == entry.code
    if bounded:
        assert sum(s["evictions"] for s in stats) > 0
        # Each writer evicts down to max_bytes after its own store; the last store's
        # eviction leaves at most max_bytes plus entries other writers renamed in
        # after its scan.
        assert len(entries) < len(KEYS)
    else:
        assert sorted(e.key for e in entries) == sorted(KEYS)
