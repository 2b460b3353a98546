"""What the CLI says, as a user reads it (issue 26): counts in singular and plural,
an unknown option answered with the verb's own usage, `--kernel` showing only what
matched."""
from __future__ import annotations

import re

import pytest

import kir
from kir.words import plural


def test_plural_words():
    assert [plural(n, "image") for n in (0, 1, 2)] == ["0 images", "1 image", "2 images"]
    assert [plural(n, "entry") for n in (1, 3)] == ["1 entry", "3 entries"]
    assert [plural(n, "launch") for n in (1, 2)] == ["1 launch", "2 launches"]


def test_one_container_and_one_image_are_singular(built, kir_cli, tmp_path):
    cubin = built["kernels_sm90.cubin"]  # a bare cubin: one container, one image
    assert len(kir.open(cubin).images) == 1
    result = kir_cli("inspect", cubin)
    assert result.returncode == 0, result.stderr
    assert f"{cubin}: cubin, 1 container, 1 image (1 cubin)" in result.stdout
    (tmp_path / "one.cubin").write_bytes(open(cubin, "rb").read())
    result = kir_cli("inspect", "-r", tmp_path)
    assert result.stdout.endswith("kir: 1 file, 1 image\n"), result.stdout


def test_one_cache_entry_is_singular(kir_cli, tmp_path):
    from kir.cache import Cache
    Cache(tmp_path / "c").store("ab" * 16, b"\x7fELF" + bytes(60), "cubin", "sm_90", {})
    listing = kir_cli("cache", "ls", tmp_path / "c")
    assert listing.returncode == 0, listing.stderr
    assert re.search(r"^1 entry, \d+ bytes in ", listing.stdout, re.M), listing.stdout
    verify = kir_cli("cache", "verify", tmp_path / "c")
    assert "1 entry intact, 0 problems in" in verify.stdout


@pytest.mark.parametrize("verb, args", [
    ("inspect", ["{app}"]), ("hash", ["{app}"]), ("extract", ["{app}", "-o", "{tmp}"]), ("diff", ["{app}", "{app}"]),
    ("records", ["{tmp}"]), ("replay", ["{tmp}"])])
def test_an_unknown_option_shows_the_verbs_usage(built, kir_cli, verb, args, tmp_path):
    args = [a.format(app=built["app"], tmp=tmp_path) for a in args]
    result = kir_cli(verb, "--no-such-option", *args)
    assert result.returncode == 2
    assert result.stderr.startswith(f"usage: kir {verb} "), result.stderr
    assert "unrecognized arguments: --no-such-option" in result.stderr
    assert "COMMAND" not in result.stderr.splitlines()[0]  # not the top-level usage


def test_inspect_kernel_prints_only_what_matched(built, kir_cli):
    app = built["app"]
    binary = kir.open(app)
    matching = [i.index for i in binary.images
                if i.kind in ("cubin", "ptx") and any("scale<float>" in k.demangled for k in i.kernels)]
    assert 0 < len(matching) < len(binary.images)
    result = kir_cli("inspect", "--kernel", "scale<float>", app)
    assert result.returncode == 0, result.stderr
    rows = [int(line.split()[0]) for line in result.stdout.splitlines() if re.match(r"^\d+\s", line)]
    assert rows == matching
    assert re.search(rf"{len(matching)} images \(.*\) with a matching kernel", result.stdout.splitlines()[0])
    kernels = [line.split()[0] for line in result.stdout.splitlines() if line.startswith("           _Z")]
    assert set(kernels) == {"_Z5scaleIfEvPT_S0_6Params"} and len(kernels) == len(matching)
