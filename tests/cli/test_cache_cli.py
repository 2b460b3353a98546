"""`kir cache ls|show|rm|verify DIR` (python/kir/commands/cache.py) as a user runs it,
on entries of a real cubin and PTX: listings agree with the files (read back by the
independent reader, tests/support/cache_reference.py), `show -o` gives back the code, `rm`
removes, `verify` exits 1 on damage and names the byte offset, bad input exits 2
with a message and no traceback."""
from __future__ import annotations

import json
import time

import pytest

import cache_reference as ref
import kir
from kir.cache import Cache

CUBIN_KEY = "0a" * 16
PTX_KEY = "0b" + "cd" * 15
OTHER_KEY = "0b" + "ef" * 15


@pytest.fixture
def cache_dir(tmp_path, built):
    cubin = built["kernels_sm90.cubin"].read_bytes()
    ptx = next(i for i in kir.open(built["app_compress_none"]).images if i.kind == "ptx").read()
    cache = Cache(tmp_path / "cache")
    cache.store(CUBIN_KEY, cubin, "cubin", "sm_90", {"producer": "kir.jit", "kernel": "_Z6squarePii"})
    time.sleep(0.02)
    cache.store(PTX_KEY, ptx, "ptx", "sm_90", {"producer": "tests", "compile.opt": "O3"})
    cache.store(OTHER_KEY, b"\x7fELF" + bytes(60), "cubin", "sm_80", {})
    return tmp_path / "cache"


def file_of(directory, key):
    return directory / key[:2] / key


def test_ls_text_and_json(kir_cli, cache_dir):
    r = kir_cli("cache", "ls", cache_dir)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["key", "kind", "arch", "size", "age", "producer", "kernel"]
    row = next(l for l in lines if l.startswith(CUBIN_KEY)).split()
    assert row[1:4] == ["cubin", "sm_90", str(file_of(cache_dir, CUBIN_KEY).stat().st_size)]
    assert row[5:] == ["kir.jit", "_Z6squarePii"]
    assert lines[-1].startswith("3 entries,")
    j = json.loads(kir_cli("cache", "ls", cache_dir, "--json").stdout)
    assert j["format"] == "kir.cache/1" and j["damaged"] == 0
    by_key = {e["key"]: e for e in j["entries"]}
    assert set(by_key) == {CUBIN_KEY, PTX_KEY, OTHER_KEY}
    for key, e in by_key.items():
        decoded = ref.decode(file_of(cache_dir, key).read_bytes())
        assert (e["kind"], e["arch"], e["meta"], e["code_size"]) == \
            (decoded["kind"], decoded["arch"], decoded["meta"], len(decoded["code"]))
        assert e["size"] == file_of(cache_dir, key).stat().st_size
    assert j["total_bytes"] == sum(e["size"] for e in j["entries"])
    # Most recently used first: the cubin was stored first.
    assert j["entries"][-1]["key"] == CUBIN_KEY


def test_show_and_output(kir_cli, cache_dir, tmp_path):
    out = tmp_path / "code.ptx"
    r = kir_cli("cache", "show", cache_dir, PTX_KEY[:6], "-o", out)
    assert r.returncode == 0, r.stderr
    assert f"key        {PTX_KEY}" in r.stdout and "meta       compile.opt = O3" in r.stdout
    assert out.read_bytes() == ref.decode(file_of(cache_dir, PTX_KEY).read_bytes())["code"]
    j = json.loads(kir_cli("cache", "show", cache_dir, CUBIN_KEY, "--json").stdout)
    assert j["entry"]["meta"] == {"producer": "kir.jit", "kernel": "_Z6squarePii"}


def test_rm(kir_cli, cache_dir):
    r = kir_cli("cache", "rm", cache_dir, CUBIN_KEY[:4], "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["removed"] == [CUBIN_KEY]
    assert not file_of(cache_dir, CUBIN_KEY).exists() and file_of(cache_dir, PTX_KEY).exists()
    r = kir_cli("cache", "rm", cache_dir, "--all")
    assert r.returncode == 0 and sorted(r.stdout.split()) == sorted(["removed", PTX_KEY, "removed", OTHER_KEY])
    assert not [p for p in cache_dir.rglob("*") if p.is_file()]


def test_verify(kir_cli, cache_dir):
    r = kir_cli("cache", "verify", cache_dir)
    assert r.returncode == 0 and "3 entries intact, 0 problems" in r.stdout
    path = file_of(cache_dir, PTX_KEY)
    data = bytearray(path.read_bytes())
    data[0] = ord("X")
    path.write_bytes(bytes(data))
    r = kir_cli("cache", "verify", cache_dir)
    assert r.returncode == 1
    assert f"{path}: at byte offset 0x0: not a kir cache entry (bad magic)" in r.stdout
    j = json.loads(kir_cli("cache", "verify", cache_dir, "--json").stdout)
    assert j["intact"] == 2 and j["problems"] == [
        {"path": str(path), "key": PTX_KEY, "message": "at byte offset 0x0: not a kir cache entry (bad magic)",
         "offset": 0, "refused": False}]
    # ls lists the others and warns.
    r = kir_cli("cache", "ls", cache_dir)
    assert r.returncode == 0 and "1 damaged or refused entry not listed" in r.stderr and PTX_KEY not in r.stdout
    assert path.exists()  # neither ls nor verify removes anything


@pytest.mark.parametrize("args, message", [
    (["ls", "{missing}"], "no such cache directory"),
    (["verify", "{file}"], "no such cache directory"),
    (["show", "{dir}", "ff"], "no entry with key ff"),
    (["show", "{dir}", "0b"], "names 2 entries: give more digits"),
    (["show", "{dir}", "XYZ"], "1 to 32 lowercase hex digits"),
    (["rm", "{dir}"], "give KEY... or --all"),
])
def test_bad_input_exits_2(kir_cli, cache_dir, tmp_path, args, message):
    (tmp_path / "file").write_text("x")
    args = [a.format(missing=tmp_path / "missing", file=tmp_path / "file", dir=cache_dir) for a in args]
    r = kir_cli("cache", *args)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "missing").exists()


def test_metadata_and_names_are_printed_with_control_characters_escaped(kir_cli, tmp_path):
    """Issue 21 item 12: an entry's arch and metadata, and the names of files in the
    directory, are other people's text. Printed raw they wrote terminal escapes
    (clear the screen, set the title) and fake lines; now each is escaped, one
    printed line stays one line, and --json keeps the exact text."""
    cache_dir = tmp_path / "cache"
    kernel = "_Z1kv\x1b[2J\x1b]0;pwned\x07\nkir: error: fake line"
    meta = {"producer": "\u202etxt.exe", "kernel": kernel, "back\\slash\r": "tab\there"}
    Cache(cache_dir).store(CUBIN_KEY, b"\x7fELF" + bytes(60), "cubin", "sm_90\x1b[31m", meta)
    (cache_dir / "0a" / "stray\x1b[2Jname").write_text("x")

    def clean(text: str) -> None:
        assert not any(c in text for c in "\x1b\x07\r\t\u202e"), repr(text)

    ls = kir_cli("cache", "ls", cache_dir)
    clean(ls.stdout)
    assert len(ls.stdout.splitlines()) == 3  # header, the entry, the total
    row = ls.stdout.splitlines()[1]
    assert "sm_90\\x1b[31m" in row and "\\u202etxt.exe" in row
    assert row.endswith("_Z1kv\\x1b[2J\\x1b]0;pwned\\x07\\x0akir: error: fake line")
    show = kir_cli("cache", "show", cache_dir, CUBIN_KEY)
    clean(show.stdout)
    assert "meta       back\\\\slash\\x0d = tab\\x09here" in show.stdout.splitlines()
    assert len(show.stdout.splitlines()) == 5 + len(meta)
    verify = kir_cli("cache", "verify", cache_dir)
    clean(verify.stdout)
    assert verify.returncode == 1 and "stray\\x1b[2Jname: not a cache entry name" in verify.stdout
    # JSON carries the exact text (escaped by JSON itself).
    assert json.loads(kir_cli("cache", "show", cache_dir, CUBIN_KEY, "--json").stdout)["entry"]["meta"] == meta
