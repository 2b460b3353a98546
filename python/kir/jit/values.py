"""What a kernel is specialized for: runtime-constant argument values, grid and
block dimensions, launch bounds (docs/jit.md).

An argument value is (1-based position, type, little-endian bytes), the form of
the JIT key's ARG records (docs/hashing.md) and of `kir.hashing.jit_key`'s
`args`. Types are the `kir_arg_type` names: i8 i16 i32 i64 u8 u16 u32 u64 f16
bf16 f32 f64 ptr bool, and `bytes` for an object (a by-value struct, or an array
read through a pointer argument). Text form, as `kir jit compile --arg` and
`kir hash --arg` take it: POS:TYPE:VALUE, e.g. `1:f64:2.5`, `4:i32:-7`,
`2:ptr:0x7f0000001000`, `3:bytes:0000803f00000040`.
"""
from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from kir.errors import OptionError
from kir.model import ArgType, arg_type

#: type name -> (size in bytes, struct format or None): every ArgType but `bytes`, which has
#: no fixed size (kir/model.hpp's table, through kir.model)
SCALARS = {t.name: (t.size, t.struct_format) for t in ArgType if t.size is not None}
TYPES = (*SCALARS, "bytes")
U32_MAX = (1 << 32) - 1


def type_code(name: str) -> int:
    """The `kir_arg_type` value of a type name (kir/kir.h), as kir.hashing takes it."""
    if name not in ArgType.__members__:
        raise OptionError(f"{name!r} is not a kir_arg_type name")
    return int(arg_type(name))


@dataclass(frozen=True)
class ArgValue:
    """One runtime-constant argument: 1-based `position`, `type` (a name of TYPES)
    and `value`, its little-endian bytes (`bytes`: the object's bytes).

    `key_type`: the kir_arg_type its JIT key's ARG record names, when that is not
    `type` (None: `type`). kir_jit_key names an array's element type (kir/kir.h,
    KIR_JIT_ARRAY / KIR_JIT_VECTOR): an array's elements are specialized as `bytes`
    (a constant global, or a by-value object's bytes) and keyed as, e.g., `f32`."""
    position: int
    type: str
    value: bytes
    key_type: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.position, int) or not 1 <= self.position <= U32_MAX:
            raise OptionError(f"argument position {self.position!r}: expected 1..{U32_MAX} (1-based)")
        if self.type not in TYPES:
            raise OptionError(f"argument {self.position}: unknown type {self.type!r}; expected one of "
                              f"{', '.join(TYPES)}")
        if not isinstance(self.value, bytes):
            raise OptionError(f"argument {self.position}: value must be bytes, not "
                              f"{type(self.value).__name__}")
        size = SCALARS.get(self.type, (None,))[0]
        if size is not None and len(self.value) != size:
            raise OptionError(f"argument {self.position}: a {self.type} value is {size} byte"
                              f"{'s' if size > 1 else ''}, got {len(self.value)}")
        if self.key_type is not None and self.key_type not in TYPES:
            raise OptionError(f"argument {self.position}: unknown key type {self.key_type!r}; expected one of "
                              f"{', '.join(TYPES)}")
        if self.type == "bytes" and not self.value:
            raise OptionError(f"argument {self.position}: an object value needs at least one byte")
        if self.type == "bool" and self.value not in (b"\0", b"\1"):
            raise OptionError(f"argument {self.position}: a bool is byte 0 or 1, got "
                              f"{self.value.hex()}")

    @classmethod
    def of(cls, position: int, type: str, value) -> "ArgValue":  # noqa: A002 - the field's name
        """From a Python value: a number (or bool) packed as `type`, or the bytes themselves."""
        if isinstance(value, (bytes, bytearray, memoryview)):
            return cls(position, type, bytes(value))
        if type == "bytes":
            raise OptionError(f"argument {position}: a bytes value must be bytes, not "
                              f"{value.__class__.__name__}")
        if type not in SCALARS:
            raise OptionError(f"argument {position}: unknown type {type!r}; expected one of "
                              f"{', '.join(TYPES)}")
        return cls(position, type, pack(position, type, value))

    @classmethod
    def parse(cls, text: str) -> "ArgValue":
        """POS:TYPE:VALUE (module docstring)."""
        parts = text.split(":", 2)
        if len(parts) != 3:
            raise OptionError(f"--arg {text!r}: expected POS:TYPE:VALUE, e.g. 1:f64:2.5")
        position_text, kind, value_text = parts
        try:
            position = int(position_text)
        except ValueError:
            raise OptionError(f"--arg {text!r}: position {position_text!r} is not an integer") from None
        if not 1 <= position <= U32_MAX:
            raise OptionError(f"--arg {text!r}: position {position} is not in 1..{U32_MAX} (1-based)")
        if kind not in TYPES:
            raise OptionError(f"--arg {text!r}: unknown type {kind!r}; expected one of {', '.join(TYPES)}")
        if kind == "bytes":
            try:
                return cls(position, kind, bytes.fromhex(value_text))
            except ValueError as error:
                raise OptionError(f"--arg {text!r}: bytes are hex digits, two per byte ({error})") from None
        try:
            number = parse_number(kind, value_text)
            return cls(position, kind, pack(position, kind, number))
        except OptionError as error:
            detail = str(error).removeprefix(f"argument {position}: ")
            raise OptionError(f"--arg {text!r}: {detail}") from None

    @property
    def type_code(self) -> int:
        return type_code(self.type)

    @property
    def key_type_code(self) -> int:
        """The kir_arg_type of the JIT key's ARG record (`key_type`, else `type`)."""
        return type_code(self.key_type or self.type)

    def number(self):
        """The value as a Python number (None for `bytes` and `bf16`)."""
        size, fmt = SCALARS.get(self.type, (None, None))
        return struct.unpack(fmt, self.value)[0] if fmt else None

    def text(self) -> str:
        """POS:TYPE:VALUE, exact (floats as hex bits when repr would not round-trip)."""
        if self.type in ("bytes", "bf16"):
            return f"{self.position}:{self.type}:{self.value.hex()}" if self.type == "bytes" else \
                f"{self.position}:bf16:{self.value.hex()}"
        n = self.number()
        if self.type == "bool":
            return f"{self.position}:bool:{int(n)}"
        if self.type == "ptr":
            return f"{self.position}:ptr:{n:#x}"
        return f"{self.position}:{self.type}:{n!r}"


def parse_number(kind: str, text: str):
    text = text.strip()
    if kind == "bool":
        lowered = text.lower()
        if lowered in ("1", "true"):
            return True
        if lowered in ("0", "false"):
            return False
        raise OptionError(f"a bool is 0, 1, true or false, not {text!r}")
    if kind in ("f16", "bf16", "f32", "f64"):
        try:
            return float.fromhex(text) if text.lower().lstrip("+-").startswith("0x") else float(text)
        except ValueError:
            raise OptionError(f"{text!r} is not a floating-point number") from None
    try:
        return int(text, 0)
    except ValueError:
        raise OptionError(f"{text!r} is not an integer (decimal, or 0x hex)") from None


def pack(position: int, kind: str, number) -> bytes:
    """`number` as `kind`'s little-endian bytes; OptionError when it does not fit."""
    size, fmt = SCALARS[kind]
    if kind in ("f16", "bf16", "f32", "f64"):
        if isinstance(number, bool) or not isinstance(number, (int, float)):
            raise OptionError(f"argument {position}: {kind} needs a number, not {number!r}")
        number = float(number)
        if kind == "bf16":
            bits = struct.unpack("<I", struct.pack("<f", number))[0]
            if math.isfinite(number) and abs(number) > 3.3895313892515355e38:
                raise OptionError(f"argument {position}: {number!r} does not fit in bf16")
            # round to nearest even, as a compiler converts a constant
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 if not math.isnan(number) else 0x7FC0
            return struct.pack("<H", bits & 0xFFFF)
        try:
            packed = struct.pack(fmt, number)
        except (OverflowError, struct.error):
            raise OptionError(f"argument {position}: {number!r} does not fit in {kind}") from None
        if kind == "f32" and math.isfinite(number) and math.isinf(struct.unpack(fmt, packed)[0]):
            raise OptionError(f"argument {position}: {number!r} does not fit in f32")
        return packed
    if kind == "bool":
        if number not in (0, 1) or isinstance(number, float):
            raise OptionError(f"argument {position}: a bool is 0 or 1, not {number!r}")
        return bytes([int(number)])
    if isinstance(number, float) or not isinstance(number, int):
        raise OptionError(f"argument {position}: {kind} needs an integer, not {number!r}")
    try:
        return struct.pack(fmt, number)
    except struct.error:
        bits = size * 8
        low, high = (0, (1 << bits) - 1) if kind[0] in "up" else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
        raise OptionError(f"argument {position}: {number} does not fit in {kind} ({low}..{high})") from None


def parse_bounds(text: str, option: str = "--bounds") -> tuple[int, int]:
    """MAXT[,MINB] (launch bounds as the command line spells them): (max threads per
    block, min blocks per multiprocessor; 0 when left out)."""
    try:
        parts = [int(p) for p in text.split(",")]
    except ValueError:
        raise OptionError(f"{option} {text!r}: expected MAXT[,MINB]") from None
    if len(parts) not in (1, 2):
        raise OptionError(f"{option} {text!r}: expected MAXT[,MINB]")
    return parts[0], parts[1] if len(parts) == 2 else 0


def dims(value, what: str) -> tuple[int, int, int] | None:
    if value is None:
        return None
    if isinstance(value, int):
        value = (value, 1, 1)
    values = tuple(value)
    if len(values) == 1:
        values = (values[0], 1, 1)
    if len(values) != 3 or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise OptionError(f"{what} {value!r}: expected three integers (x, y, z)")
    if not all(1 <= v <= U32_MAX for v in values):
        raise OptionError(f"{what} {value!r}: each dimension must be in 1..{U32_MAX}")
    return values  # type: ignore[return-value]


@dataclass
class Specialization:
    """What `kir.jit.compile` specializes a kernel for.

    args: runtime-constant arguments (ArgValue, or (position, type, value) tuples,
      or {position: (type, value)}); grid / block: dimensions whose reads
      (%nctaid / %ntid) become constants; bounds: (max threads per block,
      min blocks per multiprocessor — 0 for none) as `.maxntid` / `.minnctapersm`;
      shared_bytes: the launch's dynamic shared memory (JIT key only: code is
      not changed by it); captures: the lambda captures the launch's JIT key
      covers, (lambda, slot, offset, kir_arg_type, value bytes) as
      kir_hook_kernel_captures gives them (JIT key only: kir.jit does not
      specialize a lambda's captures, docs/jit.md "Not done")."""
    args: list[ArgValue] = field(default_factory=list)
    grid: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    bounds: tuple[int, int] | None = None
    shared_bytes: int = 0
    captures: list[tuple[str, int, int, int, bytes]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.args = normalize_args(self.args)
        self.grid = dims(self.grid, "grid")
        self.block = dims(self.block, "block")
        if self.bounds is not None:
            bounds = (self.bounds, 0) if isinstance(self.bounds, int) else tuple(self.bounds)
            if len(bounds) == 1:
                bounds = (bounds[0], 0)
            if len(bounds) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in bounds):
                raise OptionError(f"bounds {self.bounds!r}: expected (max threads, min blocks)")
            if not 1 <= bounds[0] <= 1024:
                raise OptionError(f"bounds {self.bounds!r}: max threads per block must be in 1..1024")
            if not 0 <= bounds[1] <= U32_MAX:
                raise OptionError(f"bounds {self.bounds!r}: min blocks per multiprocessor must be "
                                  f"in 0..{U32_MAX} (0: none)")
            self.bounds = bounds  # type: ignore[assignment]
        if not isinstance(self.shared_bytes, int) or self.shared_bytes < 0:
            raise OptionError(f"shared_bytes {self.shared_bytes!r}: expected a non-negative integer")
        self.captures = [_capture(c) for c in self.captures or ()]

    @classmethod
    def coerce(cls, value) -> "Specialization":
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            unknown = set(value) - {"args", "grid", "block", "bounds", "shared_bytes", "captures"}
            if unknown:
                raise OptionError(f"specialize: unknown key(s) {', '.join(sorted(map(str, unknown)))}; "
                                  "expected args, grid, block, bounds, shared_bytes, captures")
            return cls(**value)
        raise OptionError(f"specialize: expected a Specialization or a dict, not {type(value).__name__}")

    def meta(self) -> dict[str, str]:
        """As cache metadata: strings only."""
        out = {"args": " ".join(a.text() for a in self.args)}
        if self.grid:
            out["grid"] = ",".join(map(str, self.grid))
        if self.block:
            out["block"] = ",".join(map(str, self.block))
        if self.bounds:
            out["bounds"] = ",".join(map(str, self.bounds))
        if self.shared_bytes:
            out["shared_bytes"] = str(self.shared_bytes)
        if self.captures:
            out["captures"] = " ".join(f"{lam}|{slot}|{offset}|{kind}|{value.hex()}"
                                       for lam, slot, offset, kind, value in self.captures)
        return out


def _capture(item) -> tuple[str, int, int, int, bytes]:
    """(lambda, slot, offset, kir_arg_type, value bytes), checked."""
    try:
        lam, slot, offset, kind, value = item
    except (TypeError, ValueError):
        raise OptionError(f"capture {item!r}: expected (lambda, slot, offset, type, value bytes)") from None
    if isinstance(kind, str):
        kind = type_code(kind)
    if not isinstance(lam, str) or not lam or "\0" in lam:
        raise OptionError(f"capture {item!r}: the lambda's name must be non-empty text without NUL")
    for what, number, top in (("slot", slot, U32_MAX), ("offset", offset, U32_MAX), ("type", kind, 255)):
        if isinstance(number, bool) or not isinstance(number, int) or not 0 <= number <= top:
            raise OptionError(f"capture {item!r}: {what} {number!r} is not in 0..{top}")
    if not isinstance(value, (bytes, bytearray)):
        raise OptionError(f"capture {item!r}: the value must be bytes")
    return lam, slot, offset, kind, bytes(value)


def normalize_args(args) -> list[ArgValue]:
    if args is None:
        return []
    if isinstance(args, Mapping):
        items: Iterable = [(pos, *value) if isinstance(value, tuple) else value
                           for pos, value in args.items()]
    else:
        items = args
    out = []
    for item in items:
        if isinstance(item, ArgValue):
            out.append(item)
        elif isinstance(item, str):
            out.append(ArgValue.parse(item))
        elif isinstance(item, tuple) and len(item) == 3:
            out.append(ArgValue.of(*item))
        else:
            raise OptionError(f"specialize args: {item!r} is not an ArgValue, a POS:TYPE:VALUE string "
                              "or a (position, type, value) tuple")
    out.sort(key=lambda a: a.position)
    for a, b in zip(out, out[1:]):
        if a.position == b.position:
            raise OptionError(f"argument {a.position} is given twice")
    return out


__all__ = ["ArgValue", "dims", "normalize_args", "pack", "parse_number", "SCALARS", "Specialization",
           "type_code", "TYPES", "U32_MAX"]
