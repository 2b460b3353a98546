"""Who may write the kernel-object cache (issue 21, items 1 and 8; docs/cache.md,
"Who may write the cache"). An entry is code the JIT client launches inside the
app, and its checksum is no authenticator, so a cache directory, shard or entry
owned by another user, or writable by others, is refused: never read, counted as
an error, left in place, reported by `kir cache verify` (exit 1) — unless the cache
is shared with a group by name (KIR_CACHE_GROUP / group=). What kir creates is
private whatever the umask. Nothing inside the cache is reached through a link: a
shard that is a symbolic link is refused, and eviction never deletes through one.

The tests run as root, as the attack did: "another user" is uid 65534 (nobody),
made the owner with os.chown. The JIT client runs a real app (the stub runtime rig
of tests/support/jit_rig.py) whose launch the planted entry would otherwise claim."""
from __future__ import annotations

import grp
import json
import os
import stat
import time
from pathlib import Path

import pytest

from jit_rig import key_for, rig, run_app, stub_lines  # noqa: F401  (rig: the fixture)
from kir.cache import Cache, encode_entry
from kir.errors import KirError
from saxpy_record import saxpy, write_record  # noqa: F401  (saxpy: the fixture)

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")

NOBODY = 65534
ARCH = "sm_90"
KEY = "b3" + "8b" * 15


@pytest.fixture(scope="module")
def cubin(built) -> bytes:
    return built["kernels_sm90.cubin"].read_bytes()


def entry_path(directory: Path, key: str) -> Path:
    return directory / key[:2] / key


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def kir_cache(*args):
    from running import run_kir
    return run_kir("cache", *map(str, args))


def a_group() -> grp.struct_group:
    """A group to share a cache with: one that exists here and is not root's."""
    for name in ("users", "staff", "nogroup"):
        try:
            return grp.getgrnam(name)
        except KeyError:
            continue
    pytest.skip("no group to share a cache with")


# ---- what kir creates ---------------------------------------------------------------

@pytest.mark.parametrize("umask", [0o000, 0o002, 0o777])
def test_directories_are_0700_and_entries_0600_whatever_the_umask(tmp_path, cubin, umask):
    cache = tmp_path / "parent" / "cache"
    old = os.umask(umask)
    try:
        Cache(cache).store(KEY, cubin, "cubin", ARCH, {})
    finally:
        os.umask(old)
    for directory in (tmp_path / "parent", cache, cache / KEY[:2]):
        assert mode(directory) == 0o700, (directory, oct(mode(directory)))
    assert mode(entry_path(cache, KEY)) == 0o600
    assert Cache(cache).lookup(KEY).code == cubin  # and the owner can read it back


# ---- refused: another user's, or writable by others ---------------------------------

PLANTS = {
    # what the attacker controls -> (how, the words of the refusal)
    "entry of another user": (lambda c, e: os.chown(e, NOBODY, NOBODY), f"owned by uid {NOBODY}"),
    "shard of another user": (lambda c, e: os.chown(e.parent, NOBODY, NOBODY), f"owned by uid {NOBODY}"),
    "directory of another user": (lambda c, e: os.chown(c, NOBODY, NOBODY), f"owned by uid {NOBODY}"),
    "world-writable directory": (lambda c, e: os.chmod(c, 0o777), "writable by every user (mode 0777"),
    "group-writable shard": (lambda c, e: os.chmod(e.parent, 0o770), f"writable by group {os.getegid()} (mode 0770"),
    "world-writable entry": (lambda c, e: os.chmod(e, 0o666), "writable by every user (mode 0666"),
}


@needs_root
@pytest.mark.parametrize("plant", list(PLANTS))
def test_a_cache_file_another_user_could_write_is_refused_and_reported(tmp_path, cubin, plant):
    cache = tmp_path / "cache"
    Cache(cache).store(KEY, cubin, "cubin", ARCH, {"producer": "attacker"})
    entry = entry_path(cache, KEY)
    how, words = PLANTS[plant]
    how(cache, entry)
    refused = entry if "entry" in plant else entry.parent if "shard" in plant else cache
    # The lookup: refused with the file and the reason, an error and a miss; nothing removed.
    reader = Cache(cache)
    with pytest.raises(KirError, match="refused") as error:
        reader.lookup(KEY)
    assert str(refused) in str(error.value) and words in str(error.value), str(error.value)
    assert reader.stats()["errors"] == 1 and reader.stats()["misses"] == 1 and reader.stats()["hits"] == 0
    assert words in reader.last_problem
    assert entry.exists()
    # Not listed; verify names it, refused, exit 1.
    entries, problems = reader.scan()
    assert entries == []
    assert [(p.path, p.refused) for p in problems] == [(str(refused), True)], problems
    proc = kir_cache("verify", cache)
    assert proc.returncode == 1 and f"{refused}: refused: " in proc.stdout and words in proc.stdout, proc.stdout
    report = json.loads(kir_cache("verify", cache, "--json").stdout)
    assert report["intact"] == 0 and [p["refused"] for p in report["problems"]] == [True]
    ls = kir_cache("ls", cache)
    assert ls.returncode == 0 and KEY not in ls.stdout and "refused" in ls.stderr, ls.stderr
    # A store into a refused directory fails (the JIT client would refuse what it wrote).
    if "entry" not in plant:
        with pytest.raises(KirError, match="refused"):
            Cache(cache).store(KEY, cubin, "cubin", ARCH, {})


@needs_root
def test_an_entry_root_owns_is_trusted(tmp_path, cubin):
    """Root is trusted like the owner: a cache root filled for every user."""
    cache = tmp_path / "cache"
    Cache(cache).store(KEY, cubin, "cubin", ARCH, {})
    os.chown(entry_path(cache, KEY), 0, 0)
    assert Cache(cache).lookup(KEY).code == cubin


# ---- a cache shared with a group ----------------------------------------------------

@needs_root
def test_a_group_cache_accepts_its_members_and_nobody_else(tmp_path, cubin):
    group = a_group()
    cache = tmp_path / "shared"
    Cache(cache, group=group.gr_name).store(KEY, cubin, "cubin", ARCH, {})
    entry = entry_path(cache, KEY)
    # Created for the group, whatever the umask: set-group-ID directories 2770, entries 0660.
    for directory in (cache, entry.parent):
        assert mode(directory) == 0o2770 and os.stat(directory).st_gid == group.gr_gid, directory
    assert mode(entry) == 0o660 and os.stat(entry).st_gid == group.gr_gid
    # Another member's entry and directories: trusted in the group cache ...
    for path in (cache, entry.parent, entry):
        os.chown(path, NOBODY, group.gr_gid)
    assert Cache(cache, group=group.gr_name).lookup(KEY).code == cubin
    assert Cache(cache, group=str(group.gr_gid)).lookup(KEY).code == cubin  # the group by number
    # ... and through KIR_CACHE_GROUP (what the JIT client and the CLI read too) ...
    os.environ["KIR_CACHE_GROUP"] = group.gr_name
    try:
        assert Cache(cache).lookup(KEY).code == cubin
    finally:
        del os.environ["KIR_CACHE_GROUP"]
    # ... refused when the cache is not opened as the group's.
    with pytest.raises(KirError, match=f"cache directory {cache}: refused: writable by group {group.gr_gid}"):
        Cache(cache).lookup(KEY)
    # Writable by others is refused even in a group cache, and so is another group's file.
    os.chmod(entry, 0o666)
    with pytest.raises(KirError, match="refused: writable by every user"):
        Cache(cache, group=group.gr_name).lookup(KEY)
    other = NOBODY if group.gr_gid != NOBODY else 0
    os.chmod(entry, 0o660)
    os.chown(entry, NOBODY, other)
    with pytest.raises(KirError, match=f"refused: writable by group {other} "):
        Cache(cache, group=group.gr_name).lookup(KEY)
    os.chmod(entry, 0o640)  # not group-writable: then not a member's, and not ours
    with pytest.raises(KirError, match=f"refused: owned by uid {NOBODY} and group {other}, not by you \\(uid 0\\), "
                                       f"root or group {group.gr_name}"):
        Cache(cache, group=group.gr_name).lookup(KEY)


def test_an_unknown_group_is_an_error(tmp_path):
    with pytest.raises(KirError, match="cache group 'no-such-group-kir': no such group"):
        Cache(tmp_path / "c", group="no-such-group-kir")
    assert not (tmp_path / "c").exists()


# ---- item 8: symbolic links inside the cache ----------------------------------------

def test_a_shard_that_is_a_symlink_is_refused_not_followed(tmp_path, cubin):
    """The attack: DIR/ab -> a directory outside the cache holding an entry for a key
    of ab…. The lookup followed it (the JIT client ran code from outside the cache)
    while `kir cache ls` showed 0 entries."""
    outside = tmp_path / "outside"
    Cache(outside).store(KEY, cubin, "cubin", ARCH, {})  # a valid entry, owned by us: only the link is wrong
    cache = tmp_path / "cache"
    Cache(cache)
    (cache / KEY[:2]).symlink_to(outside / KEY[:2])
    reader = Cache(cache)
    with pytest.raises(KirError, match=f"cache directory {cache / KEY[:2]}: refused: a symbolic link"):
        reader.lookup(KEY)
    assert reader.stats()["errors"] == 1 and reader.stats()["hits"] == 0
    problems = reader.verify()
    assert [(p.path, p.refused) for p in problems] == [(str(cache / KEY[:2]), True)]
    assert "a symbolic link, not a directory" in problems[0].message
    assert kir_cache("verify", cache).returncode == 1
    # A store does not write through it either; rm does not remove through it.
    with pytest.raises(KirError, match="refused: a symbolic link"):
        reader.store(KEY, cubin, "cubin", ARCH, {})
    with pytest.raises(KirError, match="not a directory"):
        reader.remove(KEY)
    assert entry_path(outside, KEY).exists()


def test_eviction_never_deletes_through_a_symlinked_shard(tmp_path, cubin):
    """The attack: eviction with max_bytes deleted, through DIR/ab -> elsewhere, old
    `.tmp-*` files and files with 32-hex-digit names that were not the cache's."""
    outside = tmp_path / "outside"
    outside.mkdir()
    victims = [outside / ("ab" + "0" * 30), outside / ("ab" + "1" * 30), outside / f".tmp-{'ab' * 16}-1-0"]
    old = time.time() - 7200  # older than any entry, and a "stale temporary"
    for victim in victims:
        victim.write_bytes(b"not the cache's" * 1000)
        os.utime(victim, (old, old))
    cache = tmp_path / "cache"
    Cache(cache)
    (cache / "ab").symlink_to(outside)
    size = len(encode_entry("cd" * 16, cubin + b"x", "cubin", ARCH, {}))  # each entry's
    bounded = Cache(cache, max_bytes=2 * size)
    for i in range(4):
        bounded.store(f"{i:02x}" + "cd" * 15, cubin + bytes([i]), "cubin", ARCH, {})
    assert all(v.exists() for v in victims), [v.name for v in victims if not v.exists()]
    assert bounded.stats()["evictions"] == 2  # the cache's own entries were evicted, nothing else
    assert Cache(cache).evict(0) == 2 and all(v.exists() for v in victims)


# ---- the JIT client: the planted entry is refused, the app's own kernel runs --------

JIT_PLANTS = {
    "entry of another user": lambda c, e, o: os.chown(e, NOBODY, NOBODY),
    # the H200 attack: uid 65534 created the directory (under /tmp) and the entry
    "directory of another user": lambda c, e, o: [os.chown(p, NOBODY, NOBODY) for p in (c, e.parent, e)],
    "world-writable directory": lambda c, e, o: os.chmod(c, 0o777),
    "symlinked shard": lambda c, e, o: (os.rename(e.parent, o), e.parent.symlink_to(o)),
}


@needs_root
@pytest.mark.parametrize("plant", list(JIT_PLANTS))
def test_the_jit_client_refuses_a_planted_entry_and_the_app_kernel_runs(rig, tmp_path, plant):
    d, fatbin, cubin, static = rig
    cache = tmp_path / "cache"
    key = key_for(static, 2.5)
    Cache(cache).store(key, cubin.read_bytes(), "cubin", "sm_90", {"producer": "attacker"})
    # Trusted, the entry claims the launch with a = 2.5: it is one the client would run.
    proc, stats = run_app(rig, cache, "rr", tmp_path)
    assert stats["hits"] == 1 and stats["substituted"] == 1
    JIT_PLANTS[plant](cache, entry_path(cache, key), tmp_path / "outside")
    proc, stats = run_app(rig, cache, "rr", tmp_path)
    # Both launches are the app's own; the refusal is one line, an error and a miss.
    assert [l.split()[1] for l in stub_lines(proc)] == ["cudaLaunchKernel"] * 2, proc.stdout
    assert stats["hits"] == 0 and stats["substituted"] == 0 and stats["launches"] == 2, stats
    assert stats["errors"] >= 1 and stats["misses"] == 2, stats
    errors = [l for l in proc.stderr.splitlines() if l.startswith("kir-jit: error: ")]
    assert len(errors) == 1 and "refused: " in errors[0] and "(the app's own code runs)" in errors[0], proc.stderr
    assert entry_path(cache, key).exists()  # left for its owner to see


@needs_root
def test_the_jit_client_reads_a_group_cache_only_with_kir_cache_group(rig, tmp_path):
    d, fatbin, cubin, static = rig
    group = a_group()
    cache = tmp_path / "shared"
    key = key_for(static, 2.5)
    Cache(cache, group=group.gr_name).store(key, cubin.read_bytes(), "cubin", "sm_90", {})
    for path in (cache, entry_path(cache, key).parent, entry_path(cache, key)):
        os.chown(path, NOBODY, group.gr_gid)  # another member's
    proc, stats = run_app(rig, cache, "r", tmp_path, env_extra={"KIR_CACHE_GROUP": group.gr_name})
    assert stats["hits"] == 1 and stats["substituted"] == 1, proc.stderr
    proc, stats = run_app(rig, cache, "r", tmp_path)
    assert stats["hits"] == 0 and stats["errors"] == 1 and "writable by group" in proc.stderr


# ---- the Python paths: kir replay / kir tune --jit-cache ----------------------------

@needs_root
@pytest.mark.parametrize("verb", ["replay", "tune"])
def test_replay_and_tune_refuse_a_cache_directory_another_user_owns(tmp_path, saxpy, verb):
    """`kir replay --plan --jit-cache DIR` and `kir tune --jit-cache DIR` go through the
    same core (kir.cache.Cache): a DIR that uid 65534 created first is refused, exit 2
    with the reason, nothing written into it."""
    from tune_fakes import cli
    write_record(tmp_path / "rec", saxpy)
    (record,) = sorted((tmp_path / "rec" / "records").glob("*.kirrec"))
    planted = tmp_path / "planted"
    planted.mkdir()
    os.chown(planted, NOBODY, NOBODY)
    if verb == "replay":
        result = cli("replay", "--plan", "--specialize", "jit", "--jit-cache", planted, record)
    else:
        result = cli("tune", tmp_path / "rec", "--trials", "2", "--seed", "1", "--executor", "tune_fakes:modelled",
                     "--jit-cache", planted, "--store", "always")
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert f"cache directory {planted}: refused: owned by uid {NOBODY}" in result.stderr, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and list(planted.iterdir()) == []
