"""`kir hash BINARY`: the static hash of every kernel; `kir hash --dynamic`: a
dynamic hash from its parts, for debugging a JIT cache or a recording."""
from __future__ import annotations

import re
import struct
import sys

from kir.errors import OptionError

PACK = {"i8": "<b", "i16": "<h", "i32": "<i", "i64": "<q", "u8": "<B", "u16": "<H", "u32": "<I",
        "u64": "<Q", "f32": "<f", "f64": "<d", "ptr": "<Q", "bool": "<?"}
U32_MAX = (1 << 32) - 1  # positions, grid, block and bounds are 32-bit


def add_arguments(parser) -> None:
    parser.add_argument("binary", nargs="?", help="binary whose kernels to hash")
    parser.add_argument("--kernel", metavar="REGEX", help="only kernels whose mangled name matches")
    parser.add_argument("--json", action="store_true", help="print JSON lines, one per kernel")
    parser.add_argument("--proteus", action="store_true",
                        help="print Proteus's current 64-bit hash (decimal) instead, for kernels "
                             "with IR")
    parser.add_argument("--llvm-before-20", action="store_true",
                        help="with --proteus: the FNV-1a hash of Proteus builds on LLVM < 20")
    dynamic = parser.add_argument_group("dynamic hash (no BINARY)")
    dynamic.add_argument("--dynamic", metavar="STATIC", help="the kernel's static hash (32 hex digits)")
    dynamic.add_argument("--arch", default="", help="target architecture, e.g. sm_90")
    dynamic.add_argument("--arg", action="append", default=[], metavar="POS:TYPE:VALUE",
                         help="a runtime-constant argument, e.g. 2:i32:7, 3:f32:0.5, 4:bytes:00ff; "
                              "repeat in increasing position")
    dynamic.add_argument("--grid", metavar="X,Y,Z")
    dynamic.add_argument("--block", metavar="X,Y,Z")
    dynamic.add_argument("--bounds", metavar="MAX_THREADS,MIN_BLOCKS")
    dynamic.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")


def run(args) -> int:
    if args.dynamic:
        print(dynamic_hash(args).hex)
        return 0
    if not args.binary:
        raise OptionError("give a BINARY to hash its kernels, or --dynamic STATIC")
    from kir.binary import Binary
    from kir.hashing import kernel_hashes
    try:
        pattern = re.compile(args.kernel) if args.kernel else None
    except re.error as error:
        raise OptionError(f"--kernel {args.kernel!r}: {error}") from None
    hashes, errors = kernel_hashes(Binary.open(args.binary), not args.llvm_before_20,
                                   pattern.search if pattern else None)
    for h in hashes:  # one line per (kernel, image): kernel_hashes never repeats a pair
        if args.json:
            import json
            print(json.dumps({"image": h.image, "image_kind": h.image_kind, "target": h.target,
                              "kernel": h.kernel, "static": h.static.hex, "code": h.code_kind,
                              "source": h.source, "proteus": h.proteus}))
        elif args.proteus:
            print(f"{h.proteus if h.proteus is not None else '-':<20}  {h.target:<14} "
                  f"image #{h.image:<4} {h.kernel}")
        else:
            print(f"{h.static.hex}  {h.target:<14} {h.kernel}  ({h.source})")
    for message in errors:
        print(f"kir: error: {message}", file=sys.stderr)
    return 2 if errors else 0


def dynamic_hash(args):
    from kir.hashing import ArgType, DynamicHash, Hash128
    try:
        static = Hash128.from_hex(args.dynamic)
    except ValueError as error:
        raise OptionError(f"--dynamic: {error}") from None
    h = DynamicHash(static, args.arch)
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
        if kind == "bytes":
            return int(position), kind, bytes.fromhex(value)
        number = float(value) if kind in ("f32", "f64") else int(value, 0)
        return int(position), kind, struct.pack(PACK[kind], number)
    except (ValueError, KeyError, struct.error, OverflowError) as error:  # OverflowError: 1e300 as f32
        raise OptionError(f"--arg {spec!r}: expected POS:TYPE:VALUE with TYPE one of "
                         f"{', '.join([*PACK, 'bytes'])} ({error})") from None


def ints(text: str, count: int, option: str) -> list[int]:
    parts = text.split(",")
    if len(parts) != count or not all(p.strip().isdigit() for p in parts):
        raise OptionError(f"{option} {text!r}: expected {count} comma-separated integers")
    values = [int(p) for p in parts]
    if any(v > U32_MAX for v in values):
        raise OptionError(f"{option} {text!r}: each value must be at most {U32_MAX} (32 bits)")
    return values
