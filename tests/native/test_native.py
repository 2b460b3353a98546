"""The C++ side: unit tests and the parser fuzz target under AddressSanitizer and
UndefinedBehaviorSanitizer (the standalone mutator with gcc, libFuzzer with clang-22) — the binary
parsers and the cache entry parser —, the hook layer under ThreadSanitizer in a program
that allocates, frees and launches from several threads, and a downstream CMake project that consumes the
installed package (find_package(kir CONFIG) -> kir::kir, kir::kir_static) through the C API, from a
`cmake --install` prefix and from the Python package's kir.cmake_dir()."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import kir
from native_build import downstream_expected, run

ROOT = Path(__file__).resolve().parents[2]
FUZZ_SECONDS = int(os.environ.get("KIR_FUZZ_SECONDS", "60"))
FUZZ_SEEDS = (1, 2, 3)  # seed 3 found an out-of-bounds read through a bad program header
FUZZ_INPUTS = ("kernels.fatbin", "kernels_dc.o", "librdc.a", "app_compress_speed", "hip_ccob_v3.o", "hip_rdc.o",
               "omp_sm90.o", "embed_bitcode.o", "embedded_bundle", "proteus_hip.o", "two_modules.o", "libhip.so",
               "mneme_affine.bc")  # mneme_affine.bc: a bare bitcode file, opened as one IR module

# Sanitizer, libFuzzer and install builds of the whole core: `pytest -m "not slow"` leaves them out.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sanitized_build() -> Path:
    build = ROOT / "build" / "native-asan"
    run("cmake", "-S", ROOT, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Debug",
        "-DKIR_BUILD_TESTS=ON", "-DKIR_SANITIZE=ON")
    run("cmake", "--build", build)
    return build


def test_unit_tests_under_sanitizers(sanitized_build):
    proc = run("ctest", "--test-dir", sanitized_build, "--output-on-failure")
    assert "100% tests passed" in proc.stdout


def test_fuzz_parsers_under_sanitizers(sanitized_build, built):
    seeds = [built[n] for n in FUZZ_INPUTS]
    seeds += sorted((ROOT / "tests" / "native" / "fuzz" / "seeds").glob("*.bin"))  # fixed inputs that once hung or crashed
    for seed in FUZZ_SEEDS:
        proc = run(sanitized_build / "tests" / "native" / "cpp" / "kir_fuzz_parsers",
                   f"-seconds={FUZZ_SECONDS / len(FUZZ_SEEDS):.0f}", f"-seed={seed}", *seeds,
                   env={**os.environ, "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1"})
        assert "no failures" in proc.stdout


def cache_entry_seeds(built, directory: Path) -> list[Path]:
    """Entry files of a real cubin and PTX (written by the cache at test time), and the
    fixed ones under tests/native/fuzz/seeds/cache."""
    from kir import _core
    from kir.cache import Cache
    cache = Cache(directory / "cache")
    cubin = built["kernels_sm90.cubin"].read_bytes()
    cache.store("ab" * 16, cubin, "cubin", "sm_90", {"producer": "tests", "kernel": _core.parse_cubin(cubin).kernels[0].name})
    ptx = next(i for i in kir.open(built["app_compress_none"]).images if i.kind == "ptx").read()
    cache.store("cd" * 16, ptx, "ptx", "sm_90", {"producer": "tests", "compile.opt": "O3"})
    entries = sorted(p for p in (directory / "cache").rglob("*") if p.is_file() and len(p.name) == 32)
    return entries + sorted((ROOT / "tests" / "native" / "fuzz" / "seeds" / "cache").glob("*.kce"))


def test_fuzz_cache_entry_under_sanitizers(sanitized_build, built, tmp_path):
    """The cache entry parser and read path (tests/native/fuzz/fuzz_cache_entry.cpp): mutated
    entries, with their checksum as found and made right, parse to an entry that encodes
    back to the same bytes or to an error that names its offset."""
    seeds = cache_entry_seeds(built, tmp_path)
    assert len(seeds) >= 4
    for seed in FUZZ_SEEDS:
        proc = run(sanitized_build / "tests" / "native" / "cpp" / "kir_fuzz_cache_entry",
                   f"-seconds={max(1, FUZZ_SECONDS // 4 // len(FUZZ_SEEDS))}", f"-seed={seed}", *seeds,
                   env={**os.environ, "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1"})
        assert "no failures" in proc.stdout


def libfuzzer_build(target: str) -> Path:
    """build/native-libfuzzer, with `target` built (clang-22, libFuzzer, ASan+UBSan)."""
    build = ROOT / "build" / "native-libfuzzer"
    run("cmake", "-S", ROOT, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Debug", "-DKIR_BUILD_TESTS=ON",
        "-DKIR_LIBFUZZER=ON", "-DKIR_SANITIZE=ON", "-DCMAKE_CXX_COMPILER=clang++-22", "-DCMAKE_C_COMPILER=clang-22")
    run("cmake", "--build", build, "--target", target)
    return build


@pytest.mark.skipif(not shutil.which("clang++-22"), reason="clang++-22 (libFuzzer) not installed")
def test_libfuzzer_build_instruments_libkir():
    """-DKIR_LIBFUZZER=ON builds libkir itself with libFuzzer's coverage
    (-fsanitize=fuzzer-no-link): every object of libkir.a has its 8-bit counters, so
    libFuzzer sees libkir's edges, not only the harness's (issue 21 §14: the target
    had 4,556 counters, libkir none; now 31,280)."""
    library = libfuzzer_build("kir_fuzz_parsers") / "libkir" / "libkir.a"
    members = set(run("ar", "t", library).stdout.split())
    instrumented = {line.split(":")[1] for line in run("nm", "-A", library).stdout.splitlines()
                    if "sancov.module_ctor_8bit_counters" in line}
    assert members and instrumented == members, sorted(members - instrumented)


@pytest.mark.skipif(not shutil.which("clang++-22"), reason="clang++-22 (libFuzzer) not installed")
def test_libfuzzer_cache_entry_with_fixed_seeds(built, tmp_path):
    build = libfuzzer_build("kir_fuzz_cache_entry")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for seed in cache_entry_seeds(built, tmp_path):
        shutil.copy(seed, corpus / seed.name)
    for seed in FUZZ_SEEDS:
        proc = run(build / "tests" / "native" / "cpp" / "kir_fuzz_cache_entry", corpus, f"-seed={seed}",
                   f"-max_total_time={max(1, FUZZ_SECONDS // 4 // len(FUZZ_SEEDS))}", "-rss_limit_mb=4096",
                   "-print_final_stats=1", env={**os.environ, "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1"})
        assert "stat::number_of_executed_units" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.skipif(not shutil.which("clang++-22"), reason="clang++-22 (libFuzzer) not installed")
def test_libfuzzer_build_with_clang22_fuzzes_with_fixed_seeds(built, tmp_path):
    """The libFuzzer build (clang-22, -Werror, ASan+UBSan) compiles — libstdc++'s
    stable_sort once reached a deprecated declaration there — and libFuzzer
    itself mutates the fixtures (parsers, discoverers from files and from
    registered memory, the decompressors) under fixed seeds without a finding."""
    build = libfuzzer_build("kir_fuzz_parsers")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in FUZZ_INPUTS:
        if name in built:
            shutil.copy(built[name], corpus / name)
    for seed in (ROOT / "tests" / "native" / "fuzz" / "seeds").glob("*.bin"):  # fixed inputs that once hung or crashed
        shutil.copy(seed, corpus / seed.name)
    for seed in FUZZ_SEEDS:
        proc = run(build / "tests" / "native" / "cpp" / "kir_fuzz_parsers", corpus, f"-seed={seed}",
                   f"-max_total_time={max(1, FUZZ_SECONDS // len(FUZZ_SEEDS))}", "-rss_limit_mb=4096",
                   "-print_final_stats=1", env={**os.environ, "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1"})
        assert "stat::number_of_executed_units" in proc.stderr, proc.stderr[-2000:]


@pytest.fixture(scope="module")
def installed_prefix(tmp_path_factory) -> Path:
    build = tmp_path_factory.mktemp("kir-build")
    prefix = tmp_path_factory.mktemp("kir-prefix")
    run("cmake", "-S", ROOT, "-B", build, "-G", "Ninja", f"-DCMAKE_INSTALL_PREFIX={prefix}")
    run("cmake", "--build", build)
    run("cmake", "--install", build)
    return prefix


def test_install_layout(installed_prefix):
    assert (installed_prefix / "include" / "kir" / "kir.h").is_file()
    assert (installed_prefix / "include" / "kir" / "binary.hpp").is_file()
    libdir = next(p for p in (installed_prefix / "lib", installed_prefix / "lib64") if p.exists())
    assert (libdir / "libkir.a").is_file() and (libdir / "libkir.so").exists()
    assert (libdir / "libkir.so.0").is_symlink()  # a prefix keeps the versioned chain; a wheel cannot
    assert (libdir / "cmake" / "kir" / "kirConfig.cmake").is_file()


@pytest.fixture(scope="module", params=["prefix", "wheel"])
def kir_package(request) -> str:
    """Where find_package(kir) looks: a `cmake --install` prefix, or the CMake package
    inside the installed Python package (kir.cmake_dir(), the wheel's layout)."""
    if request.param == "prefix":
        return f"-DCMAKE_PREFIX_PATH={request.getfixturevalue('installed_prefix')}"
    return f"-Dkir_DIR={kir.cmake_dir()}"


@pytest.fixture(scope="module")
def downstream(kir_package, tmp_path_factory) -> Path:
    build = tmp_path_factory.mktemp("downstream")
    run("cmake", "-S", ROOT / "tests" / "packaging" / "downstream", "-B", build, "-G", "Ninja", kir_package)
    run("cmake", "--build", build)
    return build


def needed(path: Path) -> list[str]:
    from elftools.elf.elffile import ELFFile
    with open(path, "rb") as f:
        return [t.needed for t in ELFFile(f).get_section_by_name(".dynamic").iter_tags() if t.entry.d_tag == "DT_NEEDED"]


@pytest.mark.parametrize("target", ["list_kernels", "list_kernels_static"])
def test_downstream_project(downstream, built, target):
    """The downstream project links kir::kir and kir::kir_static from both layouts and
    runs; neither executable needs libxxhash (kir uses xxhash's header only), and the
    static one does not need libkir.so."""
    out = run(downstream / target, built["app"]).stdout.splitlines()
    expected = downstream_expected(built["app"])
    expected.append(f"read {kir.open(built['app']).images[0].size}")
    assert out == expected
    libraries = needed(downstream / target)
    assert not [n for n in libraries if "xxhash" in n], libraries
    assert any(n.startswith("libkir.so") for n in libraries) == (target == "list_kernels"), libraries
    link = run("ninja", "-C", downstream, "-t", "commands", target).stdout
    assert "xxhash" not in link


def test_downstream_reports_errors(downstream, tmp_path):
    proc = subprocess.run([downstream / "list_kernels", tmp_path], capture_output=True, text=True)
    assert proc.returncode == 2 and "is a directory" in proc.stderr


def test_python_package_ships_the_cmake_package():
    assert (Path(kir.cmake_dir()) / "kirConfig.cmake").is_file()


def test_hook_layer_under_thread_sanitizer(built, tmp_path):
    """libkir_hook.so built with -fsanitize=thread, preloaded (after the TSan
    runtime) into hook_app running 4 threads of cudaMalloc/cudaFree/cudaLaunchKernel
    with the tracing client on: no data race reported."""
    build = ROOT / "build" / "native-tsan"
    run("cmake", "-S", ROOT, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
        "-DKIR_SANITIZE_THREAD=ON")
    run("cmake", "--build", build, "--target", "kir_hook")
    hook = next(build.rglob("libkir_hook.so"))
    tsan = run("g++", "-print-file-name=libtsan.so").stdout.strip()
    trace = tmp_path / "trace.jsonl"
    with open(trace, "w") as out:
        proc = subprocess.run([built["hook_app"], "4"], capture_output=True, text=True, pass_fds=(out.fileno(),),
                              env={**os.environ, "LD_PRELOAD": f"{tsan} {hook}", "KIR_TRACE": "json",
                                   "KIR_TRACE_FD": str(out.fileno()), "TSAN_OPTIONS": "exitcode=66"})
    assert "ThreadSanitizer" not in proc.stderr, proc.stderr[-4000:]
    assert proc.returncode == 3, proc.stderr[-2000:]
    launches = [l for l in trace.read_text().splitlines() if '"event":"launch"' in l]
    assert len(launches) == 3 + 4 * 100


def tsan_program(target: str) -> Path:
    """One of tests/native/cpp's programs built with ThreadSanitizer (build/native-tsan)."""
    build = ROOT / "build" / "native-tsan"
    run("cmake", "-S", ROOT, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
        "-DKIR_SANITIZE_THREAD=ON", "-DKIR_BUILD_TESTS=ON")
    run("cmake", "--build", build, "--target", target)
    return build / "tests" / "native" / "cpp" / target


def test_cache_under_thread_sanitizer():
    """The cache's in-memory table (lock-free readers, a writer growing it) and its C ABI
    from 4 reader threads while a fifth stores (tests/native/cpp/cache_test.cpp), under
    ThreadSanitizer: no data race reported."""
    proc = subprocess.run([tsan_program("kir_cache_test")], capture_output=True, text=True,
                          env={**os.environ, "TSAN_OPTIONS": "exitcode=66 halt_on_error=1"})
    assert "ThreadSanitizer" not in proc.stderr, proc.stderr[-4000:]
    assert proc.returncode == 0 and "0 failed" in proc.stdout, proc.stdout + proc.stderr[-2000:]


@pytest.mark.parametrize("mode", ["", "copy-20", "store"])
def test_recorder_snapshot_pipeline_under_thread_sanitizer(tmp_path, mode):
    """The recorder's copy pipeline (libkir/recorder/snapshot.cpp: staging buffers
    refilled while a pool of writer threads stores chunks, RecordBuilder's chunk
    lists filled from several threads; tests/native/cpp/snapshot_test.cpp with its
    host-memory driver), 4 writers, under ThreadSanitizer: no data race reported,
    whether the record is written or a copy or a store fails."""
    proc = subprocess.run([tsan_program("kir_snapshot_test"), tmp_path / "rec", "4", "3", "65536",
                           *([mode] if mode else [])], capture_output=True, text=True,
                          env={**os.environ, "TSAN_OPTIONS": "exitcode=66 halt_on_error=1"})
    assert "ThreadSanitizer" not in proc.stderr, proc.stderr[-4000:]
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert proc.stdout.startswith("failed: " if mode else "written "), proc.stdout


def test_recorder_allocations_from_several_threads_under_thread_sanitizer(built, tmp_path):
    """The recorder (libkir_record.so) and the hook built with ThreadSanitizer,
    serving cuMemAlloc/cuMemFree from 8 threads of rec_faults over the host-memory
    driver (tests/record/test_record_faults_cpu.py) while its VA range cannot be reserved
    (a size no address space holds), so every allocation falls back: no data race
    reported (the warning flag, issue 21 item 15), and the warning said once."""
    from faults_rig import stub_environment
    build = ROOT / "build" / "native-tsan"
    run("cmake", "-S", ROOT, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=RelWithDebInfo",
        "-DKIR_SANITIZE_THREAD=ON")
    run("cmake", "--build", build, "--target", "kir_hook", "kir_record")
    hook, recorder = next(build.rglob("libkir_hook.so")), next(build.rglob("libkir_record.so"))
    tsan = run("g++", "-print-file-name=libtsan.so").stdout.strip()
    proc = subprocess.run([built["rec_faults"], built["kernels_sm90.cubin"], "alloc-threads", "8"], capture_output=True,
                          text=True, timeout=300,
                          env={**stub_environment(built), "LD_PRELOAD": f"{tsan} {hook}",
                               "KIR_HOOK_CLIENTS": str(recorder), "KIR_RECORD_DIR": str(tmp_path / "rec"), "KIR_RECORD_VA_SIZE": str(1 << 50),
                               "TSAN_OPTIONS": "exitcode=66 halt_on_error=1"})
    assert "ThreadSanitizer" not in proc.stderr, proc.stderr[-4000:]
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == "launch a=1 ok\n"
    warnings = [line for line in proc.stderr.splitlines() if "cannot reserve the VA range" in line]
    assert len(warnings) == 1, proc.stderr[-2000:]
