"""`kir hash BINARY`: the static hash of every kernel; `kir hash --jit-key`,
`--launch-identity` (and format 1's `--dynamic`): a hash from its parts, for
debugging a JIT cache or a recording (docs/hashing.md).

Several binaries (and directories with -r, kir.commands.inputs) may be given:
with more than one, each file's lines follow a `PATH:` line (as llvm-nm prints),
and every JSON record carries its file's `path`. `--json` prints one document
(kir.hash/2: every kernel's record and the files that could not be read), as
every verb's --json does; `--jsonl` the same records as JSON Lines (kir.hash/1),
each printed as its file is read. `--arch` keeps the kernels of
those targets. An option of the other form (`--grid` with a BINARY, `--kernel`
with `--jit-key`) is a usage error, exit 2, never silently ignored."""
from __future__ import annotations

import sys

from kir.commands import inputs
from kir.envelope import add_json_argument, envelope
from kir.errors import OptionError
from kir.jit.values import pack, parse_number
from kir.kernel_pattern import HELP as KERNEL_HELP, kernel_pattern
from kir.model import ArgType

#: every kir_arg_type name -> its little-endian struct format (kir/model.hpp); None where
#: there is none: bf16 (packed by kir.jit.values.pack) and bytes (given as hex)
PACK = {t.name: t.struct_format for t in ArgType}
U32_MAX = (1 << 32) - 1  # positions, grid, block and bounds are 32-bit
SCHEMA = "kir.hash/2"  # the --json document (docs/schemas/hash.schema.json)
LINE_SCHEMA = "kir.hash/1"  # each --jsonl line (docs/schemas/hash-line.schema.json)


def add_arguments(parser) -> None:
    inputs.add_arguments(parser, nargs="*", help="binaries whose kernels to hash")  # none with --jit-key & co.
    parser.add_argument("--kernel", metavar="REGEX", help=f"only kernels whose {KERNEL_HELP}")
    inputs.add_scan_arguments(parser)
    add_json_argument(parser, help=f"print one JSON document ({SCHEMA}: every kernel's record, and errors)")
    parser.add_argument("--jsonl", action="store_true",
                        help=f"print JSON Lines, one record per (kernel, image) as each file is read ({LINE_SCHEMA})")
    parser.add_argument("--proteus", action="store_true",
                        help="print Proteus's current 64-bit hash (decimal) instead, for kernels "
                             "with IR")
    parser.add_argument("--llvm-before-20", action="store_true",
                        help="with --proteus: the FNV-1a hash of Proteus builds on LLVM < 20")
    from kir.progress import add_argument as add_progress_argument
    add_progress_argument(parser)
    dynamic = parser.add_argument_group("a JIT key, a launch identity or format 1's dynamic hash (no BINARY)")
    # --jit-key, --launch-identity, --dynamic: one of the three (run() says so otherwise, as kir errors do)
    dynamic.add_argument("--jit-key", metavar="STATIC",
                       help="the JIT key of the kernel with this static hash (32 hex digits): --arg are "
                            "its runtime-constant arguments, --grid/--block the dims it is specialized for")
    dynamic.add_argument("--launch-identity", metavar="STATIC",
                       help="the launch identity: --arg are every parameter's bytes, --grid and --block "
                            "are required")
    dynamic.add_argument("--dynamic", metavar="STATIC",
                       help="format 1's dynamic hash (what records written before format 2 carry)")
    dynamic.add_argument("--arch", default="",
                         help="target architecture, e.g. sm_90 (with BINARY: only kernels of these "
                              "targets, e.g. sm_90,sm_80)")
    dynamic.add_argument("--arg", action="append", default=[], metavar="POS:TYPE:VALUE",
                         help="an argument, e.g. 2:i32:7, 3:f32:0.5, 4:bytes:00ff; an array as "
                              "comma-separated values, 5:f64:1,2,3")
    dynamic.add_argument("--grid", metavar="X,Y,Z")
    dynamic.add_argument("--block", metavar="X,Y,Z")
    dynamic.add_argument("--bounds", metavar="MAX_THREADS,MIN_BLOCKS")
    dynamic.add_argument("--shared", metavar="BYTES", help="dynamic shared memory (--jit-key, --launch-identity)")
    dynamic.add_argument("--capture", action="append", default=[], metavar="LAMBDA:SLOT:OFFSET:TYPE:VALUE",
                         help="a lambda capture (--jit-key)")
    dynamic.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")


#: The options of each form: (option, attribute, its "not given" value).
BINARY_OPTIONS = (("-r/--recursive", "recursive", False), ("--kernel", "kernel", None), ("--json", "json", False),
                  ("--jsonl", "jsonl", False),
                  ("--proteus", "proteus", False), ("--llvm-before-20", "llvm_before_20", False))
KEY_OPTIONS = (("--arg", "arg", []), ("--grid", "grid", None), ("--block", "block", None),
               ("--bounds", "bounds", None), ("--shared", "shared", None), ("--capture", "capture", []),
               ("--config", "config", []))


def given(args, options) -> list[str]:
    return [name for name, attribute, unset in options if getattr(args, attribute) != unset]


def run(args) -> int:
    if args.jit_key or args.launch_identity or args.dynamic:
        if sum(bool(x) for x in (args.jit_key, args.launch_identity, args.dynamic)) > 1:
            raise OptionError("give one of --jit-key, --launch-identity and --dynamic")
        if args.binaries:
            raise OptionError("--jit-key, --launch-identity and --dynamic take no BINARY")
        if extra := given(args, BINARY_OPTIONS):
            raise OptionError(f"{', '.join(extra)}: only with a BINARY to hash, not with "
                              "--jit-key, --launch-identity or --dynamic")
        print(jit_key(args) if args.jit_key else launch_identity(args) if args.launch_identity
              else dynamic_hash(args).hex)
        return 0
    if not args.binaries:
        raise OptionError("give a BINARY to hash its kernels, or --jit-key / --launch-identity STATIC")
    if args.json and args.jsonl:
        raise OptionError("give one of --json (one document) and --jsonl (a line per kernel)")
    if extra := given(args, KEY_OPTIONS):
        raise OptionError(f"{', '.join(extra)}: only with --jit-key, --launch-identity or "
                          "--dynamic, not when hashing a BINARY's kernels")
    from kir.errors import KirError, llvmlite_installed, missing_extra
    from kir.report import parse_arch_filter, processor
    if args.proteus and not llvmlite_installed():  # Proteus's hash reads the IR with llvmlite
        raise missing_extra("llvmlite", "ir", "kir hash --proteus")
    archs = parse_arch_filter(args.arch)
    pattern = kernel_pattern(args.kernel) if args.kernel else None
    from kir.progress import Progress
    many = len(args.binaries) > 1 or args.recursive
    status = 0
    document = {"kernels": [], "errors": []} if args.json else None  # --json: printed at the end
    files = list(inputs.expand(args.binaries, args.recursive))
    progress = Progress("hashing", total=len(files))
    for number, item in enumerate(files):
        progress.label = f"hashing file {number + 1}/{len(files)}, images" if len(files) > 1 else "hashing images"
        try:
            binary = inputs.open_binary(item.path, args)
        except (KirError, OSError) as error:
            progress.clear()
            print(f"kir: error: {error}", file=sys.stderr)
            if document is not None:
                document["errors"].append({"path": item.path, "error": str(error)})
            status = 2
            continue
        hashes, errors = kernel_hashes_of(binary, args, pattern, progress.callback)
        progress.clear()  # the file's lines go to the same terminal
        hashes = [h for h in hashes if archs is None or processor(h.target) in archs]
        if not item.explicit and not hashes and not errors:
            continue  # found by -r, no kernels: a host library
        if document is not None:
            document["kernels"] += [record_of(h, item.path) for h in hashes]
            document["errors"] += [{"path": item.path, "error": message} for message in errors]
        else:
            if many and not args.jsonl:
                print(f"\n{item.path}:")
            print_hashes(hashes, args, item.path)
        for message in errors:
            print(f"kir: error: {message}", file=sys.stderr)
        if errors:
            status = 2
    if document is not None:
        import json

        import kir
        print(json.dumps(envelope(SCHEMA, kir_version=kir.__version__, **document)))
    return status


def kernel_hashes_of(binary, args, pattern, progress=None):
    from kir.hashing import kernel_hashes
    return kernel_hashes(binary, not args.llvm_before_20, pattern.selects if pattern else None, progress=progress)


def record_of(h, path: str) -> dict:
    """One (kernel, image)'s JSON record: a kir.hash/2 document's `kernels` item, and
    (with its tag first) a kir.hash/1 line."""
    return {"path": path, "image": h.image, "image_kind": h.image_kind, "target": h.target, "kernel": h.kernel,
            "static": h.static_hash, "code": h.code_kind, "source": h.source, "proteus": h.proteus,
            "omp_region": h.omp_region}


def print_hashes(hashes, args, path: str) -> None:
    for h in hashes:  # one line per (kernel, image): kernel_hashes never repeats a pair
        if args.jsonl:
            import json
            print(json.dumps(envelope(LINE_SCHEMA, **record_of(h, path))))
        elif args.proteus:
            print(f"{h.proteus if h.proteus is not None else '-':<20}  {h.target:<14} "
                  f"image #{h.image:<4} {h.kernel}")
        else:
            region = f"; OpenMP region {h.omp_region}" if h.omp_region else ""
            print(f"{h.static_hash}  {h.target:<14} {h.kernel}  ({h.source}{region})")


def static_of(text: str, option: str):
    from kir.hashing import Hash128
    try:
        return Hash128.from_hex(text)
    except ValueError as error:
        raise OptionError(f"{option}: {error}") from None


def shared_of(args) -> int:
    if args.shared is None:
        return 0
    if not args.shared.isdigit() or int(args.shared) >= 1 << 64:
        raise OptionError(f"--shared {args.shared!r}: expected a byte count (64 bits)")
    return int(args.shared)


def config_of(args) -> list[tuple[str, bytes]]:
    return [(key, value.encode()) for key, _, value in (item.partition("=") for item in args.config)]


def jit_key(args) -> str:
    from kir.hashing import ArgType, jit_key as key
    static = static_of(args.jit_key, "--jit-key")
    values = {}
    for spec in args.arg:
        position, kind, value = parse_arg(spec)
        if position in values:
            raise OptionError(f"--arg {spec!r}: position {position} given twice")
        values[position] = (position, getattr(ArgType, kind), value)
    if 0 in values:
        raise OptionError("--arg: positions are 1-based")
    captures = [capture_of(spec) for spec in args.capture]
    return key(static, args.arch, list(values.values()),
               grid=ints(args.grid, 3, "--grid") if args.grid else None,
               block=ints(args.block, 3, "--block") if args.block else None, shared_bytes=shared_of(args),
               bounds=ints(args.bounds, 2, "--bounds") if args.bounds else None, config=config_of(args),
               captures=captures)


def capture_of(spec: str):
    """LAMBDA:SLOT:OFFSET:TYPE:VALUE; LAMBDA may itself hold colons."""
    from kir.hashing import ArgType
    parts = spec.rsplit(":", 4)
    try:
        lam, slot, offset, kind, value = parts
        position, kind, data = parse_arg(f"{slot}:{kind}:{value}")
        offset = int(offset)
        if not 0 <= offset <= U32_MAX:
            raise ValueError(f"offset {offset} is not in 0..{U32_MAX}")
    except (ValueError, OptionError) as error:
        raise OptionError(f"--capture {spec!r}: expected LAMBDA:SLOT:OFFSET:TYPE:VALUE ({error})") from None
    return lam, position, offset, getattr(ArgType, kind), data


def launch_identity(args) -> str:
    from kir.hashing import launch_identity as identity
    static = static_of(args.launch_identity, "--launch-identity")
    if not args.grid or not args.block:
        raise OptionError("--launch-identity needs --grid and --block")
    params: list = []
    for spec in args.arg:
        position, _, value = parse_arg(spec)
        if position < 1:
            raise OptionError(f"--arg {spec!r}: positions are 1-based")
        params += [None] * (position - len(params))
        if params[position - 1] is not None:
            raise OptionError(f"--arg {spec!r}: position {position} given twice")
        params[position - 1] = value
    return identity(static, args.arch, params, grid=ints(args.grid, 3, "--grid"),
                    block=ints(args.block, 3, "--block"), shared_bytes=shared_of(args))


def dynamic_hash(args):
    from kir.hashing import ArgType, DynamicHash, HashDomain
    static = static_of(args.dynamic, "--dynamic")
    h = DynamicHash(HashDomain.dynamic_v1, static, args.arch)
    for spec in args.arg:
        position, kind, value = parse_arg(spec)
        h.arg(position, getattr(ArgType, kind), value)
    for name in ("grid", "block"):
        if getattr(args, name):
            getattr(h, name)(*ints(getattr(args, name), 3, f"--{name}"))
    if args.bounds:
        h.bounds(*ints(args.bounds, 2, "--bounds"))
    for item in args.config:
        key, _, value = item.partition("=")
        h.config(key, value.encode())
    return h.finish()


def parse_arg(spec: str) -> tuple[int, str, bytes]:
    try:
        position, kind, value = spec.split(":", 2)
        if not 0 <= int(position) <= U32_MAX:
            raise ValueError(f"position {position} is not in 0..{U32_MAX}")
        if kind not in PACK:
            raise ValueError(f"unknown type {kind!r}")
        if kind == "bytes":
            return int(position), kind, bytes.fromhex(value)
        # kir.jit.values packs every scalar type (f16, bf16 too) and refuses what does not fit
        return int(position), kind, b"".join(pack(int(position), kind, parse_number(kind, v))
                                             for v in value.split(","))
    except ValueError as error:  # OptionError is one: a value that does not fit its type
        raise OptionError(f"--arg {spec!r}: expected POS:TYPE:VALUE with TYPE one of "
                         f"{', '.join(PACK)} ({error})") from None


def ints(text: str, count: int, option: str) -> list[int]:
    parts = text.split(",")
    if len(parts) != count or not all(p.strip().isdigit() for p in parts):
        raise OptionError(f"{option} {text!r}: expected {count} comma-separated integers")
    values = [int(p) for p in parts]
    if any(v > U32_MAX for v in values):
        raise OptionError(f"{option} {text!r}: each value must be at most {U32_MAX} (32 bits)")
    return values


__all__ = ["add_arguments", "BINARY_OPTIONS", "capture_of", "config_of", "dynamic_hash", "given", "ints",
           "jit_key", "kernel_hashes_of", "KEY_OPTIONS", "launch_identity", "PACK", "parse_arg",
           "print_hashes", "run", "SCHEMA", "shared_of", "static_of", "U32_MAX"]
