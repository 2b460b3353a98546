"""The kernel-object cache (kir.cache, docs/cache.md) on a real cubin and PTX built
by nvcc at test time: the round trip through disk and memory, the file layout
against an independent reader (tests/support/cache_reference.py, PyPI xxhash), damaged
entries (flipped byte, truncation, wrong magic, another key's file, bad fields
under a valid checksum, a symlink, a FIFO) reported with their byte offset and
answered as misses, and LRU eviction by last use."""
from __future__ import annotations

import os
import struct
import time
from pathlib import Path

import pytest

import cache_reference as ref
import kir
from kir import _core
from kir.cache import Cache, encode_entry, parse_entry
from kir.errors import KirError, OptionError
from kir.model import ArgType

ARCH = "sm_90"


@pytest.fixture(scope="module")
def cubin(built) -> bytes:
    return built["kernels_sm90.cubin"].read_bytes()


@pytest.fixture(scope="module")
def ptx(built) -> bytes:
    binary = kir.open(built["app_compress_none"])
    return next(i for i in binary.images if i.kind == "ptx").read()


def jit_key(kernel: str, code: bytes, value: float) -> str:
    """A JIT key as the JIT client makes one: the kernel's static hash, the arch and a
    runtime-constant argument's value."""
    static = _core.static_hash(kernel, "cubin", [code])
    return _core.DynamicHash(static, ARCH).arg(1, ArgType.f64, struct.pack("<d", value)).finish().hex


def meta_for(kernel: str) -> dict[str, str]:
    return {"producer": "tests/core/test_cache.py", "producer.version": kir.__version__, "kernel": kernel,
            "key.arg.1": "f64:2.5", "compile.opt": "O3", "resource.registers": "32", "note": "ünïcödé ✓"}


def entry_path(directory: Path, key: str) -> Path:
    return directory / key[:2] / key


def test_roundtrip_real_cubin_disk_and_memory(tmp_path, cubin):
    kernels = _core.parse_cubin(cubin).kernels
    kernel = kernels[0].name
    key = jit_key(kernel, cubin, 2.5)
    writer = Cache(tmp_path)
    writer.store(key, cubin, "cubin", ARCH, meta_for(kernel))
    # The same process: from memory.
    hit = writer.lookup(key)
    assert hit.code == cubin and hit.kind == "cubin" and hit.arch == ARCH and hit.meta == meta_for(kernel)
    assert writer.stats() == {"hits": 1, "memory_hits": 1, "misses": 0, "errors": 0, "evictions": 0, "stores": 1}
    # Another handle (another process would be the same): from disk, then memory.
    reader = Cache(tmp_path)
    for _ in range(3):
        entry = reader.lookup(key)
        assert entry.code == cubin and entry.meta == meta_for(kernel) and entry.key == key
    assert reader.stats()["hits"] == 3 and reader.stats()["memory_hits"] == 2
    # The code read back is the cubin, kernels and all.
    assert [k.name for k in _core.parse_cubin(entry.code).kernels] == [k.name for k in kernels]
    # A different argument value is a different key: a miss.
    assert reader.lookup(jit_key(kernel, cubin, 3.5)) is None
    assert reader.stats()["misses"] == 1
    # The file: one entry, named by its key under a 2-digit subdirectory, mode 0600.
    path = entry_path(tmp_path, key)
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == [path]
    assert path.stat().st_mode & 0o777 == 0o600
    assert entry.size == path.stat().st_size


def test_file_layout_matches_the_independent_reader(tmp_path, cubin, ptx):
    for kind, code in (("cubin", cubin), ("ptx", ptx)):
        key = ref.checksum(code).hex()  # any 128-bit value serves as a key
        Cache(tmp_path).store(key, code, kind, ARCH, meta_for("k"))
        data = entry_path(tmp_path, key).read_bytes()
        decoded = ref.decode(data)
        assert decoded["code_offset"] % 16 == 0
        assert {k: decoded[k] for k in ("key", "kind", "arch", "meta", "code")} == \
            {"key": key, "kind": kind, "arch": ARCH, "meta": meta_for("k"), "code": code}
        # Byte for byte what the reference writes, both ways.
        assert data == ref.encode(key, code, kind, ARCH, meta_for("k"))
        assert encode_entry(key, code, kind, ARCH, meta_for("k")) == data
        assert parse_entry(data) == {"key": key, "kind": kind, "arch": ARCH, "meta": meta_for("k"), "code": code}


def test_store_rejects_bad_entries(tmp_path):
    cache = Cache(tmp_path)
    key = "0" * 32
    with pytest.raises(OptionError, match="code kind 'elf'"):
        cache.store(key, b"x", "elf", ARCH)
    with pytest.raises(OptionError, match="not a cache key"):
        cache.store("ABC", b"x", "cubin", ARCH)
    with pytest.raises(KirError, match="arch '': must be 1 to 64 bytes"):
        cache.store(key, b"x", "cubin", "")
    with pytest.raises(KirError, match="a NUL byte"):
        cache.store(key, b"x", "cubin", ARCH, {"k": "a\0b"})
    with pytest.raises(KirError, match="a metadata key is empty"):
        cache.store(key, b"x", "cubin", ARCH, {"": "v"})
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_open_errors(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(KirError, match="not a directory"):
        Cache(tmp_path / "file")
    with pytest.raises(KirError, match="cannot open the cache directory.*No such file"):
        Cache(tmp_path / "missing", create=False)
    Cache(tmp_path / "a" / "b" / "c")  # created with its parents
    assert (tmp_path / "a" / "b" / "c").is_dir()


# ---- damaged entries -------------------------------------------------------------

def damage_cases(cubin: bytes):
    """(name, how to damage the entry file's bytes, expected message, expected offset)."""
    key = "c0" + "ff" * 15
    meta = {"producer": "t", "kernel": "k"}
    good = ref.encode(key, cubin, "cubin", ARCH, meta)
    code_at = ref.decode(good)["code_offset"]
    end = code_at + len(cubin)
    other = "d1" + "ee" * 15
    return key, [
        ("flipped code byte", lambda b: b[:code_at + 100] + bytes([b[code_at + 100] ^ 1]) + b[code_at + 101:],
         "checksum mismatch", end),
        ("flipped checksum byte", lambda b: b[:-1] + bytes([b[-1] ^ 0x80]), "checksum mismatch", end),
        ("truncated", lambda b: b[:len(b) // 2], "truncated: the header describes", len(good) // 2),
        ("truncated to 10 bytes", lambda b: b[:10], "truncated: 0xa bytes", 10),
        ("empty", lambda b: b"", "truncated: 0x0 bytes", 0),
        ("wrong magic", lambda b: b"KIRCACHF" + b[8:], "bad magic", 0),
        ("trailing bytes", lambda b: b + b"xx", "0x2 bytes after the checksum", len(good)),
        ("another key's entry", lambda b: ref.encode(other, cubin, "cubin", ARCH, meta),
         f"holds key {other}, not {key}", 16),
        ("unknown kind, valid checksum", lambda b: ref.encode(key, cubin, "cubin", ARCH, meta, kind_number=9),
         "unknown code kind 9", 32),
        ("metadata length past its end, valid checksum",
         lambda b: ref.encode(key, cubin, "cubin", ARCH, meta, meta_blob=struct.pack("<I", 1000) + b"k" * 8,
                              meta_count=1), "metadata item 0 key of 0x3e8 bytes runs past", 64 + len(ARCH)),
        ("invalid UTF-8, valid checksum",
         lambda b: ref.encode(key, cubin, "cubin", ARCH, {}, meta_blob=struct.pack("<I", 2) + b"\xc3\x28" +
                              struct.pack("<I", 0), meta_count=1), "metadata item 0 key: invalid UTF-8",
         64 + len(ARCH) + 4),
        ("metadata count too large", lambda b: ref.encode(key, cubin, "cubin", ARCH, meta, meta_count=5000),
         "5000 metadata items (at most 1024)", 36),
    ], good


@pytest.mark.parametrize("case", range(12))
def test_damaged_entry_is_reported_missed_and_removed(tmp_path, cubin, case):
    key, cases, good = damage_cases(cubin)
    name, damage, message, offset = cases[case]
    path = entry_path(tmp_path, key)
    path.parent.mkdir(parents=True)
    path.write_bytes(damage(good))
    # verify: the problem, with its byte offset; nothing changed.
    problems = Cache(tmp_path).verify()
    assert len(problems) == 1, name
    p = problems[0]
    assert (p.path, p.key, p.offset) == (str(path), key, offset), (name, p)
    assert message in p.message and f"at byte offset {offset:#x}" in p.message, (name, p.message)
    assert path.exists()
    # The CLI's verify says the same, exit 1.
    proc = kir_cache("verify", tmp_path)
    assert proc.returncode == 1 and message in proc.stdout
    # lookup: a miss, counted as an error, the file removed; no exception.
    cache = Cache(tmp_path)
    assert cache.lookup(key) is None
    assert cache.stats()["errors"] == 1 and cache.stats()["misses"] == 1
    assert message in cache.last_problem and str(path) in cache.last_problem
    assert not path.exists()
    # The good entry stored afterwards is a hit.
    cache.store(key, cubin, "cubin", ARCH, {"producer": "t", "kernel": "k"})
    assert Cache(tmp_path).lookup(key).code == cubin


def test_newer_format_version_is_a_miss_but_stays(tmp_path, cubin):
    """An entry written by a newer kir sharing the directory: not ours to read, not ours
    to delete."""
    key = "ab" * 16
    path = entry_path(tmp_path, key)
    path.parent.mkdir(parents=True)
    path.write_bytes(ref.encode(key, cubin, "cubin", ARCH, {}, version=2))
    cache = Cache(tmp_path)
    assert cache.lookup(key) is None and "format version 2 (this kir reads 1)" in cache.last_problem
    assert path.exists()


def test_symlink_and_fifo_in_place_of_entries(tmp_path, cubin):
    good = "aa" * 16
    Cache(tmp_path).store(good, cubin, "cubin", ARCH, {})
    link, fifo = "ab" * 16, "ac" * 16
    for k in (link, fifo):
        entry_path(tmp_path, k).parent.mkdir(exist_ok=True)
    entry_path(tmp_path, link).symlink_to(entry_path(tmp_path, good))
    os.mkfifo(entry_path(tmp_path, fifo))
    problems = {p.key: p.message for p in Cache(tmp_path).verify()}
    assert problems == {link: "a symbolic link, not an entry file", fifo: "not a regular file"}
    cache = Cache(tmp_path)
    assert cache.lookup(link) is None and cache.lookup(fifo) is None  # no hang on the FIFO
    assert cache.stats()["errors"] == 2
    assert entry_path(tmp_path, good).exists() and not entry_path(tmp_path, link).is_symlink()


def test_verify_reports_stray_files(tmp_path, cubin):
    cache = Cache(tmp_path)
    key = "12" * 16
    cache.store(key, cubin, "cubin", ARCH, {})
    (tmp_path / "ab").mkdir()
    misplaced = tmp_path / "ab" / key
    misplaced.write_bytes(entry_path(tmp_path, key).read_bytes())
    (tmp_path / "ab" / "notes.txt").write_text("x")
    stale = tmp_path / "12" / f".tmp-{key}-1-0"
    stale.write_bytes(b"half")
    fresh = tmp_path / "12" / f".tmp-{key}-2-0"
    fresh.write_bytes(b"being written")
    old = time.time() - 7200
    os.utime(stale, (old, old))
    problems = {Path(p.path).name: p.message for p in cache.verify()}
    assert problems == {key: "entry in the wrong subdirectory (expected 12/)",
                        "notes.txt": "not a cache entry name (32 lowercase hex digits)",
                        stale.name: "stale temporary (a writer died before renaming it into place)"}


# ---- LRU eviction ---------------------------------------------------------------

def sized_entry(cubin: bytes, i: int) -> bytes:
    return cubin[: len(cubin) // 2] + bytes([i]) * 16  # entries of one size


def test_lru_evicts_least_recently_used_first(tmp_path, cubin):
    keys = [f"{i:02x}" * 16 for i in range(1, 6)]
    unbounded = Cache(tmp_path)
    for i, key in enumerate(keys[:3]):
        unbounded.store(key, sized_entry(cubin, i), "cubin", ARCH, {"n": str(i)})
        time.sleep(0.02)
    size = entry_path(tmp_path, keys[0]).stat().st_size
    # A disk hit (a fresh handle) is a use: keys[0] becomes the most recently used.
    assert Cache(tmp_path).lookup(keys[0]) is not None
    time.sleep(0.02)
    bounded = Cache(tmp_path, max_bytes=3 * size)
    bounded.store(keys[3], sized_entry(cubin, 3), "cubin", ARCH, {"n": "3"})
    remaining = sorted(p.name for p in tmp_path.rglob("*") if p.is_file())
    assert remaining == sorted([keys[0], keys[2], keys[3]])  # keys[1]: least recently used
    assert bounded.stats()["evictions"] == 1
    # A memory hit touches nothing on disk; the bound holds after every store.
    time.sleep(0.02)
    bounded.store(keys[4], sized_entry(cubin, 4), "cubin", ARCH, {"n": "4"})
    remaining = sorted(p.name for p in tmp_path.rglob("*") if p.is_file())
    assert remaining == sorted([keys[0], keys[3], keys[4]])
    assert sum(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file()) <= 3 * size
    # Evicted from disk, an entry this handle holds stays valid in memory.
    assert bounded.lookup(keys[3]).code == sized_entry(cubin, 3)


def test_max_bytes_holds_over_many_stores(tmp_path, cubin):
    cache = Cache(tmp_path, max_bytes=len(cubin) * 5)
    for i in range(30):
        cache.store(f"{i:032x}", cubin + bytes([i]), "cubin", ARCH, {})
        total = sum(p.stat().st_size for p in tmp_path.rglob("*") if p.is_file())
        assert total <= len(cubin) * 5
    assert cache.stats()["evictions"] == 30 - len([p for p in tmp_path.rglob("*") if p.is_file()])
    assert Cache(tmp_path).lookup(f"{29:032x}") is not None  # the newest stays
    held = len(cache.entries())
    assert held == 4 and Cache(tmp_path).evict(0) == held and cache.entries() == []


def test_remove(tmp_path, cubin):
    cache = Cache(tmp_path)
    key = "9" * 32
    cache.store(key, cubin, "cubin", ARCH, {})
    assert cache.remove(key) is True and cache.remove(key) is False
    assert Cache(tmp_path).lookup(key) is None


def kir_cache(*args):
    from running import run_kir
    return run_kir("cache", *map(str, args))
