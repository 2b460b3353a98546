"""Kernel-name patterns (`--kernel REGEX`, KIR_TRACE_KERNELS, KIR_RECORD_KERNELS):
one engine that cannot recurse on a name, one dialect and one rule in every
command (libkir/include/kir/support/kernel_pattern.hpp, python/kir/kernel_pattern.py).

Issue 21, item 3: the tracing client and the recorder matched with libstdc++'s
recursive std::regex inside the app — about 250 bytes of stack per character of
the name, so a long name killed the app's thread — while the other commands used
Python's `re`: two dialects, and `kir hash` matched the mangled name only.

The app below registers and launches, on a thread with a 256 KiB stack, a kernel
whose mangled name is 100,000 characters long, one whose demangled name is (139,261
characters from a 101-character mangled name: nested templates, each level named
twice through a substitution), and the short AXPY, through the stub CUDA runtime and
driver of tests/support/stub_cuda.py. The stub driver has every function the
recorder loads, each failing, so that `kir record` starts and selects launches as on
a GPU, and then cannot copy anything.
"""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

import kir
import stub_cuda as override
from build import rpath, source  # tests/support/build.py (conftest puts it on the path)

LENGTH = 100_000
LONG = f"_Z{LENGTH}" + "k" * LENGTH + "Pf"  # not demangled: libstdc++ refuses names past 1024 characters


def nested_name(levels: int) -> str:
    """k(P<...>) for `template <class A, class B> struct P;`, T0 = int, Tn = P<Tn-1, Tn-1>,
    as g++ mangles it: each level's second argument is a substitution of its first
    (S_, S0_, S1_, ...: the index in base 36)."""
    def index(j: int) -> str:
        digits = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
        return digits[j] if j < 36 else index(j // 36) + digits[j % 36]
    return "_Z1k1P" + "IS_" * (levels - 1) + "IiiE" + "".join(f"S{index(j)}_E" for j in range(levels - 1))


NESTED = nested_name(14)  # demangled: k(P<P<P<...int, int> >...> >), 139,261 characters
KERNELS = [LONG, NESTED, override.AXPY]  # as the app registers and launches them

APP = source("hook/kernel_pattern_app.c")

# Every driver function libkir/recorder/driver.cpp loads that the stub driver lacks:
# present, so the recorder starts; failing (CUDA_ERROR_NO_DEVICE), so nothing is copied.
RECORDER_DRIVER_FUNCTIONS = (
    "cuCtxSetCurrent cuCtxGetDevice cuCtxSynchronize cuDevicePrimaryCtxRetain cuDeviceGetName "
    "cuMemAddressReserve cuMemAddressFree cuMemCreate cuMemRelease cuMemMap cuMemUnmap cuMemSetAccess "
    "cuMemGetAllocationGranularity cuMemHostAlloc cuMemcpyDtoH_v2 cuMemcpyDtoHAsync_v2 cuMemcpyDtoDAsync_v2 "
    "cuMemAlloc_v2 cuMemFree_v2 cuStreamCreate cuPointerGetAttribute cuGetErrorName").split()


@pytest.fixture(scope="module")
def long_name_app(built, tmp_path_factory):
    d = tmp_path_factory.mktemp("long-name")
    driver = override.STUB_DRIVER + "".join(f"int {f}() {{ return 100; }}\n" for f in RECORDER_DRIVER_FUNCTIONS)
    override.build_stub_libraries(d, driver=driver)
    (d / "app.c").write_text(APP.replace("AXPY", override.AXPY).replace("NESTED", NESTED).replace("LENGTH", str(LENGTH)))
    # --no-as-needed: the app calls no driver function, the recorder dlopens the (stub) driver by name.
    subprocess.run(["gcc", "-Wall", "app.c", f"-L{d}", "-l:libcudart.so", "-Wl,--no-as-needed", "-l:libcuda.so.1", "-pthread",
                    *rpath(d), "-o", "app"], check=True, cwd=d)
    return d / "app", built["kernels.fatbin"]


def traced_kernels(trace: Path) -> list[tuple[str, str]]:
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    return [(e["event"], e["kernel"]) for e in events if e["event"] in ("register-kernel", "launch")]


# The 100k mangled name, the 139k demangled name, neither (both searched whole), a short name.
SELECTIONS = [(r"^_Z100000k+Pf$", [LONG]), (r"^k\(P<P<.*int>( >)+\)$", [NESTED]), (r"k(x|y)", []),
              (override.AXPY, [override.AXPY])]


def test_the_names_are_as_long_as_they_say():
    assert len(LONG) > 100_000 and kir.demangle(LONG) == LONG
    assert len(NESTED) == 101 and len(kir.demangle(NESTED)) == 139_261


@pytest.mark.parametrize("pattern,kernels", SELECTIONS)
def test_trace_matches_100k_names_on_a_256k_thread_stack(long_name_app, hostile_library_path, kir_cli, tmp_path,
                                                         pattern, kernels):
    app, fatbin = long_name_app
    # -o: lines longer than a pipe's atomic write would interleave with the app's on one stdout.
    result = kir_cli("trace", "--json", "-o", tmp_path / "trace", "--kernel", pattern, "--", app, fatbin)
    assert result.returncode == 0, result.stderr[-2000:]  # std::regex: SIGSEGV, the app's thread overflowed
    assert "app launched 0 0 0\napp done\n" in result.stdout
    assert traced_kernels(tmp_path / "trace") == [("register-kernel", k) for k in kernels] + [("launch", k) for k in kernels]


@pytest.mark.parametrize("pattern,kernels", SELECTIONS)
def test_record_selects_by_100k_names_on_a_256k_thread_stack(long_name_app, hostile_library_path, kir_cli, tmp_path,
                                                         pattern, kernels):
    app, fatbin = long_name_app
    result = kir_cli("record", "-o", tmp_path, "--kernel", pattern, "--", app, fatbin)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "app launched 0 0 0\napp done\n" in result.stdout
    # The stub driver copies nothing: a selected launch is one the recorder tried to record.
    tried = [line for line in result.stderr.splitlines() if line.startswith("kir-record: cannot record ")]
    assert tried == [f"kir-record: cannot record {kir.demangle(k)} launch #0: cannot create the recorder's stream: "
                     "unknown CUDA error (100)" for k in kernels]
    summary = [line for line in result.stderr.splitlines() if line.startswith("kir-record: recorded ")]
    assert len(summary) == 1 and summary[0].startswith("kir-record: recorded 0 of 3 launches in ")
    assert ("could not be recorded" in summary[0]) == bool(kernels)



def test_a_bad_kir_trace_kernels_set_by_hand_is_said_once_and_traces_no_kernel(long_name_app):
    app, fatbin = long_name_app
    env = {**os.environ, "LD_PRELOAD": str(override.HOOK), "KIR_TRACE": "json", "KIR_TRACE_KERNELS": "(?<=x)y"}
    proc = subprocess.run([app, fatbin], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0 and proc.stdout.endswith("app launched 0 0 0\napp done\n"), proc.stderr[-2000:]
    lines = proc.stderr.splitlines()
    assert [line for line in lines if "KIR_TRACE_KERNELS" in line] == [
        "kir-trace: error: KIR_TRACE_KERNELS (?<=x)y: not a kir pattern: lookbehind (?<= at offset 0: not supported; "
        "no kernel is traced"]
    assert [line for line in lines if '"kernel":' in line] == []  # neither registrations nor launches

# --- one dialect and one rule in every command ------------------------------------------

AXPY, WITH_STRUCT = "_Z4axpyfPKfPfi", "_Z11with_struct6Paramsxc"  # hook_app's kernels

COMMANDS = ("inspect", "hash", "diff", "trace")


def selected_by_each_command(kir_cli, app: Path, pattern: str) -> dict[str, set[str]]:
    """The mangled names of the kernels each command keeps for `--kernel pattern`."""
    inspect = json.loads(kir_cli("inspect", "--json", "--kernel", pattern, app).stdout)
    hashes = kir_cli("hash", "--jsonl", "--kernel", pattern, app).stdout.splitlines()
    diff = json.loads(kir_cli("diff", "--json", "--unchanged", "--kernel", pattern, app, app).stdout)
    trace = kir_cli("trace", "--json", "--kernel", pattern, "--", app)
    assert trace.returncode == 3, trace.stderr  # hook_app's own status
    events = [json.loads(line) for line in trace.stdout.splitlines() if line.startswith("{")]
    return {"inspect": {k["name"] for image in inspect["images"] for k in image.get("kernels", [])},
            "hash": {json.loads(line)["kernel"] for line in hashes},
            "diff": {k["kernel"] for k in diff["unchanged"]},
            "trace": {e["kernel"] for e in events if e["event"] == "register-kernel"}}


@pytest.mark.parametrize("pattern,kernels", [
    # the demangled name only ("with_struct(Params, long long, char)"), with a POSIX class
    # (Python's re read "[[:alpha:]]" as a set; `kir hash` matched the mangled name only)
    (r"^[[:alpha:]]+_struct\(", {WITH_STRUCT}),
    (r"^_Z4axpy", {AXPY}),  # the mangled name only
    (r"axpy\(float|\(Params", {AXPY, WITH_STRUCT}),
    (r"(?i)^AXPY", {AXPY}),
    (r"^axpy\(float, float const\*, float\*, int\)$", {AXPY}),
    (r"\bwith_struct\b.*\blong long\b", {WITH_STRUCT}),
])
def test_every_command_selects_the_same_kernels(built, kir_cli, pattern, kernels):
    assert selected_by_each_command(kir_cli, built["hook_app"], pattern) == {c: kernels for c in COMMANDS}


@pytest.mark.parametrize("command", ["inspect", "hash", "diff", "jit", "trace", "record"])
@pytest.mark.parametrize("pattern,reason", [
    ("(?<=x)y", "lookbehind (?<= at offset 0: not supported"),  # Python's re had it, the hook's clients not
    (r"(a)\1", r"backreference \1 at offset 3: not supported"),
    ("(", "( at offset 0: missing )"),
    ("a{1001}", "repetition {1001} at offset 1: counts past 1000"),
    (r"(\w{1000}){6}", "pattern too large at offset 10: more than 5000 NFA instructions (counted repetitions "
                       "expanded)"),  # past KernelPattern::kMaxProgram
])
def test_a_pattern_kir_refuses_is_one_line_and_exit_2_in_every_command(built, kir_cli, tmp_path, command, pattern,
                                                                        reason):
    app, marker = built["hook_app"], tmp_path / "ran"
    args = {"inspect": ["inspect", app], "hash": ["hash", app], "diff": ["diff", app, app],
            "jit": ["jit", "compile", app], "trace": ["trace"], "record": ["record", "-o", tmp_path / "rec"]}[command]
    run_app = ["--", "touch", marker] if command in ("trace", "record") else []
    result = kir_cli(*args, "--kernel", pattern, *run_app)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"kir: error: --kernel {pattern!r}: not a kir pattern: {reason}\n"
    assert not marker.exists()  # refused before the app ran


def test_the_pattern_and_its_rule_are_libkir_s():
    from kir import _core
    p = _core.KernelPattern(r"^axpy\(float")
    assert p.pattern == r"^axpy\(float" and not p.search(AXPY)
    assert p.selects(AXPY) and p.selects(AXPY, kir.demangle(AXPY))  # the demangled name, computed or given
    assert not p.selects(WITH_STRUCT) and _core.KernelPattern("(?:a)xpy").selects(AXPY)
    with pytest.raises(kir.KirError, match=r"^not a kir pattern: \( at offset 0: missing \)$"):
        _core.KernelPattern("(")
    # The parser does not recurse on the pattern either (Python's main thread).
    assert _core.KernelPattern("(" * 50_000 + "axpy" + ")" * 50_000).selects(AXPY)


# --- the dialect against an independent oracle: Python's re ----------------------------
# Hypothesis writes patterns from the dialect's grammar (literals, escaped metacharacters,
# `.`, bracket expressions, class escapes, groups, alternation, every quantifier and its
# lazy form, anchors, a leading (?i)) and names (ASCII: C++ mangled and demangled names,
# a string the pattern should match inside random text, random text); libkir's matcher
# must agree with re.search on every one. POSIX classes are left out: Python's re reads
# "[[:alpha:]]" otherwise (test_every_command_selects_the_same_kernels covers them).

import re  # noqa: E402

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

META = set("\\.^$|?*+()[]{}")
PLAIN = "abcxyzABXZ019_<>,:~ -&#=!@%;'\"/]}"  # ']' and '}' alone are literal in every dialect
LITERALS = PLAIN + "".join(sorted(META))
NAME_CHARS = st.characters(min_codepoint=0x20, max_codepoint=0x7E) | st.just("\t")
CLASS_SAMPLES = {"d": "7", "w": "q", "s": " ", "D": "-", "W": "(", "S": "Z"}


def literal(c: str) -> str:
    return "\\" + c if c in META else c


def in_bracket(c: str) -> str:
    return "\\" + c if c in "\\]^-[" else c


@st.composite
def atoms(draw, depth: int):
    kind = draw(st.sampled_from(["literal"] * 4 + ["dot", "class", "bracket", "anchor"] + ["group"] * (depth > 0)))
    if kind == "literal":
        c = draw(st.sampled_from(LITERALS))
        return literal(c), c, True
    if kind == "dot":
        return ".", draw(st.sampled_from(PLAIN)), True
    if kind == "class":
        k = draw(st.sampled_from(sorted(CLASS_SAMPLES)))
        return "\\" + k, CLASS_SAMPLES[k], True
    if kind == "anchor":
        return draw(st.sampled_from(["^", "$", r"\b"])), "", False
    if kind == "bracket":
        negate = draw(st.booleans())
        items, samples = [], []
        for _ in range(draw(st.integers(1, 3))):
            form = draw(st.sampled_from(["char", "range", "class"]))
            if form == "char":
                c = draw(st.sampled_from(LITERALS))
                items.append(in_bracket(c)), samples.append(c)
            elif form == "range":
                lo, hi = sorted(draw(st.lists(st.sampled_from("09AZaz_!~,"), min_size=2, max_size=2)))
                items.append(in_bracket(lo) + "-" + in_bracket(hi)), samples.append(hi)
            else:
                k = draw(st.sampled_from(sorted(CLASS_SAMPLES)))
                items.append("\\" + k), samples.append(CLASS_SAMPLES[k])
        sample = draw(st.sampled_from(PLAIN)) if negate else draw(st.sampled_from(samples))
        return "[" + "^" * negate + "".join(items) + "]", sample, True
    text, sample = draw(regexes(depth - 1))
    return "(" + draw(st.sampled_from(["", "?:"])) + text + ")", sample, True


@st.composite
def pieces(draw, depth: int):
    text, sample, repeatable = draw(atoms(depth))
    if not repeatable or draw(st.booleans()):
        return text, sample
    n = draw(st.integers(0, 3))
    m = n + draw(st.integers(0, 2))
    quantifier = draw(st.sampled_from(["*", "+", "?", f"{{{n}}}", f"{{{n},}}", f"{{{n},{m}}}"]))
    lazy = draw(st.sampled_from(["", "?"]))
    low = {"*": 0, "+": 1, "?": 0}.get(quantifier, n)
    count = draw(st.integers(low, max(low, 1 if quantifier == "?" else (m if "," in quantifier and quantifier[-2] != "," else low + 2))))
    return text + quantifier + lazy, sample * count


@st.composite
def regexes(draw, depth: int = 2):
    branches = []
    for _ in range(draw(st.integers(1, 3))):
        parts = draw(st.lists(pieces(depth), max_size=4))
        branches.append(("".join(t for t, _ in parts), "".join(s for _, s in parts)))
    return "|".join(t for t, _ in branches), draw(st.sampled_from([s for _, s in branches]))


@st.composite
def names(draw, sample: str):
    kind = draw(st.sampled_from(["inside", "mangled", "demangled", "random"]))
    if kind == "inside":
        return draw(st.text(NAME_CHARS, max_size=6)) + sample + draw(st.text(NAME_CHARS, max_size=6))
    if kind == "mangled":
        ident = draw(st.text("abcxyz_019", min_size=1, max_size=8))
        return f"_Z{len(ident)}{ident}" + draw(st.text("PKfdivcjlmISE_0", max_size=8))
    if kind == "demangled":
        ident = draw(st.text("abcxyz_", min_size=1, max_size=8))
        params = draw(st.lists(st.sampled_from(["float", "float const*", "int", "double*", "P<int, int>"]), max_size=3))
        return f"{ident}({', '.join(params)})"
    return draw(st.text(NAME_CHARS, max_size=12))


@st.composite
def cases(draw):
    text, sample = draw(regexes())
    if draw(st.integers(0, 4)) == 0:
        text, sample = "(?i)" + text, draw(st.sampled_from([sample, sample.upper(), sample.swapcase()]))
    return text, [draw(names(sample)) for _ in range(4)]


@settings(max_examples=2000, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(cases())
def test_the_matcher_agrees_with_python_re(case):
    from kir import _core
    text, tried = case
    pattern, oracle = _core.KernelPattern(text), re.compile(text)
    for name in tried:
        assert pattern.search(name) == bool(oracle.search(name)), (text, name)


def test_the_oracle_test_sees_both_answers():
    """The grammar's names are not all misses (or all hits): the oracle test above can fail."""
    hits = []

    @settings(max_examples=300, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
    @given(cases())
    def collect(case):
        text, tried = case
        hits.extend(bool(re.search(text, name)) for name in tried)
    collect()
    assert 0.2 < sum(hits) / len(hits) < 0.9, sum(hits) / len(hits)


# --- what the dialect leaves out: refused, naming the construct and its offset ---------

@pytest.mark.parametrize("pattern,reason", [
    ("a(?=b)", "lookahead (?= at offset 1"),
    ("a(?!b)", "negative lookahead (?! at offset 1"),
    ("(?<=a)b", "lookbehind (?<= at offset 0"),
    ("(?<!a)b", "negative lookbehind (?<! at offset 0"),
    ("(?P<n>a)", "named group (?P< at offset 0"),
    ("(?<n>a)", "named group (?< at offset 0"),
    ("(?P<n>a)(?P=n)", "named group (?P< at offset 0"),
    ("(?#note)a", "comment (?# at offset 0"),
    ("(?>a)", "atomic group (?> at offset 0"),
    ("(?s).", "inline flags (?s) at offset 0"),
    ("(?i:a)", "inline flags (?i: at offset 0"),
    ("a(?i)", "(?i) at offset 1: supported only at the start of the pattern"),
    (r"(a)\1", r"backreference \1 at offset 3"),
    (r"\A_Z", r"escape \A at offset 0"),
    (r"x\z", r"escape \z at offset 1"),
    (r"x\Z", r"escape \Z at offset 1"),
    (r"\x41", r"escape \x at offset 0"),
    (r"\pL", r"escape \p at offset 0"),
    (r"\Bx", r"escape \B at offset 0"),
    ("a\\", r"\ at offset 1: nothing to escape at the end of the pattern"),
    ("a{,3}", "'{' at offset 1: not a repetition {n}, {n,} or {n,m}"),
    ("a{x}", "'{' at offset 1: not a repetition"),
    ("a{3,1}", "repetition {3,1} at offset 1: bounds reversed"),
    ("a{1001}", "repetition {1001} at offset 1: counts past 1000"),
    ("*a", "repetition '*' at offset 0: nothing to repeat"),
    ("a|+", "repetition '+' at offset 2: nothing to repeat"),
    ("^*", "repetition '*' at offset 1: nothing to repeat"),
    ("a**", "repetition '*' at offset 2: repeats a repetition"),
    ("a*+", "repetition '+' at offset 2: repeats a repetition"),  # possessive
    ("a{2}{3}", "repetition '{' at offset 4: repeats a repetition"),
    ("(a", "( at offset 0: missing )"),
    ("a)", ") at offset 1: unmatched"),
    ("[a", "[ at offset 0: missing ]"),
    ("[[:word:]]", "class [:word:] at offset 1: unknown"),
    ("[[=a=]]", "collating element or equivalence class [= at offset 1"),
    ("[[a]", "'[' inside a bracket expression at offset 1"),
    ("[z-a]", "range z-a at offset 1: ends reversed"),
    ("[a-c-e]", "'-' at offset 4: neither first, last nor a range"),
    (r"[\d-z]", r"range at offset 1: from a class"),
    (r"[\b]", r"\b inside a bracket expression at offset 1"),
    ("[é]", "non-ASCII byte in a bracket expression at offset 1"),
    ("(x{1000}){6}", "pattern too large at offset 9: more than 5000 NFA instructions"),
])
def test_each_construct_outside_the_dialect_is_refused_by_name_and_offset(pattern, reason):
    from kir import _core
    with pytest.raises(kir.KirError) as refused:
        _core.KernelPattern(pattern)
    assert str(refused.value).startswith("not a kir pattern: " + reason), str(refused.value)


@pytest.mark.parametrize("pattern,name,expected", [
    ("é", "xéy", True),  # non-ASCII bytes outside brackets: literal bytes
    ("^.{2}$", "é", True),  # `.` is one byte: é is two in UTF-8
    ("a$", "a\n", False),  # `$` is the end of the name only (Python's re: also before a final newline)
    ("(?i)[^a]", "A", False),
    ("(?i)[[:lower:]]+$", "ABC", True),
    ("[]a]+$", "a]", True),
    ("x{0}y", "y", True),
    ("()*x", "x", True),
])
def test_bytes_and_edges(pattern, name, expected):
    from kir import _core
    assert _core.KernelPattern(pattern).search(name) is expected


def test_the_largest_program_still_matches_a_long_name_in_bounded_time():
    """About kMaxProgram instructions, all alive at once, over a 100,000-character name: the
    cost is the product (a few seconds at most), never more."""
    import time

    from kir import _core
    pattern = _core.KernelPattern(r"(k{1000}){4}x|k{990}$")
    assert 4990 < pattern.program_size <= 5000
    start = time.monotonic()
    assert pattern.search(LONG[:-2]) and not pattern.search(LONG)
    assert time.monotonic() - start < 30
