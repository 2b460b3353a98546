"""Long fuzzing campaigns of kir's readers written in Python (issue 21 §18): a plain
mutation loop, faster than the tests' hypothesis loops, for runs of hours.

    python benchmarks/fuzz_python.py records --seconds 1800 --seed 1
    python benchmarks/fuzz_python.py mneme   --seconds 1800 --seed 1
    python benchmarks/fuzz_python.py bitcode --seconds 1800 --seed 1 --module tests/.../mneme_affine.bc

Families and their seeds, made here from real writers:
- records: a recording by kir's C++ writer (kir._core.RecordBuilder), its record
  file or a chunk file mutated, then read as `kir records` / `kir replay --plan`
  read it (kir.record: load, check, prologue/epilogue/changed ranges, code);
- mneme: a small Mneme recording (the Mneme writer of tests/support/mneme_writer.py),
  its JSON, a prologue, a diff or a bytes epilogue mutated, then read by kir.mneme
  (read_database, read_snapshot, read_epilogue);
- bitcode: mutants of a real module read by kir's LLVM worker (kir.ir.read_modules,
  500 a request), the text of each that read, in this process.
Mutations: 1-6 edits (bit flip, byte set, an extreme u32/u64, insertion, deletion,
truncation). Any exception other than a KirError is a finding: the input and its
traceback are saved under --findings. Prints executions, exec/s and findings.
"""
from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXTREMES = [0, 1, 7, 0x7F, 0x80, 0xFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 1 << 32, 1 << 40, (1 << 63) - 1, (1 << 64) - 1]


def mutate(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        at = rng.randrange(len(out) + 1)
        how = rng.randrange(7)
        if how == 0 and out:
            at = min(at, len(out) - 1)
            out[at] ^= 1 << rng.randrange(8)
        elif how == 1 and out:
            at = min(at, len(out) - 1)
            out[at] = rng.randrange(256)
        elif how in (2, 3):
            width = 4 if how == 2 else 8
            out[at:at + width] = (rng.choice(EXTREMES) & ((1 << (8 * width)) - 1)).to_bytes(width, "little")
        elif how == 4:
            out[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        elif how == 5:
            del out[at:at + rng.randint(1, 64)]
        else:
            del out[at:]
    return bytes(out)


def records_seed(directory: Path) -> tuple[list[Path], callable]:
    """The recording of tests/support/record_fuzz.py (write_recording), read as the test
    reads it (read_everything)."""
    sys.path[:0] = [str(ROOT / "tests" / "support")]
    from record_fuzz import read_everything, write_recording
    record, chunks = write_recording(directory)
    read_everything(record)
    return [record, *chunks], lambda _: read_everything(record)


def mneme_seed(directory: Path) -> tuple[list[Path], callable]:
    """A small Mneme recording (two instances: a diff and a bytes epilogue)."""
    sys.path[:0] = [str(ROOT / "tests" / "support")]
    import mneme_writer as writer
    from kir import mneme
    writer.write_recording(directory, b"BC\xc0\xde", sizes=(600, 40))
    files = sorted(p for p in directory.iterdir() if not p.name.endswith(".bc"))
    databases = [mneme.read_database(p) for p in mneme.find_databases(directory)]

    def read(target: Path) -> None:
        if target.suffix == ".json":
            mneme.read_database(target)
            return
        for kernel in databases:
            for inst in kernel.instances:
                prologue = mneme.read_snapshot(directory / inst.prologue)
                mneme.read_epilogue(directory / inst.epilogue, prologue)
    for f in files:
        read(f)
    return files, read


def run_files(family: str, seconds: float, seed: int, findings: Path) -> None:
    from kir.errors import KirError
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as scratch:
        files, read = (records_seed if family == "records" else mneme_seed)(Path(scratch) / "seed")
        originals = {f: f.read_bytes() for f in files}
        runs, refused, found = 0, 0, 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            for _ in range(100):
                target = files[rng.randrange(len(files))]
                data = mutate(originals[target], rng)
                target.write_bytes(data)
                try:
                    read(target)
                except KirError:
                    refused += 1
                except Exception:  # a finding: anything but a KirError
                    found += 1
                    save(findings, family, runs, target.name, data, traceback.format_exc())
                target.write_bytes(originals[target])
                runs += 1
        report(family, runs, time.perf_counter() - start, found, f"{refused} refused")


def run_bitcode(module: Path, seconds: float, seed: int, findings: Path) -> None:
    from kir.ir import IrModule, read_modules
    rng = random.Random(seed)
    original = module.read_bytes()
    runs, crashed, readable, found = 0, 0, 0, 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        batch = [mutate(original, rng) for _ in range(500)]
        try:
            modules = read_modules([IrModule(i, "", -1, bitcode=b) for i, b in enumerate(batch)])
            for m in modules:
                crashed += " crashed (SIG" in m.error or " exited (" in m.error
                if not m.error:
                    readable += 1
                    m.text()
        except Exception:
            found += 1
            save(findings, "bitcode", runs, "batch", b"".join(len(b).to_bytes(8, "little") + b for b in batch),
                 traceback.format_exc())
        runs += len(batch)
    report("bitcode", runs, time.perf_counter() - start, found,
           f"{crashed} crashed LLVM in the worker, {readable} readable")


def save(findings: Path, family: str, run: int, name: str, data: bytes, trace: str) -> None:
    findings.mkdir(parents=True, exist_ok=True)
    (findings / f"{family}-{run}-{name}").write_bytes(data)
    (findings / f"{family}-{run}-{name}.txt").write_text(trace)
    print(trace, file=sys.stderr)


def report(family: str, runs: int, wall: float, found: int, detail: str) -> None:
    print(f"{family}: {runs} executions in {wall:.0f} s ({runs / wall:.0f}/s), {found} findings, {detail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("family", choices=["records", "mneme", "bitcode"])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--module", type=Path, help="bitcode: the module to mutate (e.g. the fixture mneme_affine.bc)")
    parser.add_argument("--findings", type=Path, default=Path("fuzz-findings"))
    args = parser.parse_args()
    if args.family == "bitcode":
        if args.module is None:
            parser.error("bitcode needs --module")
        run_bitcode(args.module, args.seconds, args.seed, args.findings)
    else:
        run_files(args.family, args.seconds, args.seed, args.findings)


if __name__ == "__main__":
    main()
