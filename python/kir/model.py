"""kir's vocabulary: every kind of thing kir names, as Python enums.

Each enum is built from the core's one name table (libkir/include/kir/model.hpp,
exported as `_core.name_table`), so Python holds no second list of names. The
members are `str`: a member equals, hashes and prints as its name, so JSON output
and comparisons with plain strings see exactly the names the core uses
(`ImageKind.code_object == "code-object"`). The bindings convert the core's C++
enums to these members and back (`_core.Image.kind` is an ImageKind).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from kir import _core
from kir.errors import OptionError


class _Names(str, enum.Enum):
    """A member is its name: str() and format() give the name, not 'Class.member'."""

    def __str__(self) -> str:
        return str.__str__(self)

    __format__ = str.__format__

    @property
    def number(self) -> int:
        """The member's C++ (and C ABI) value: its place in the name table."""
        return _NUMBERS[type(self).__name__][self]


_NUMBERS: dict[str, dict] = {}


def _enum(cls: str, table: str) -> type[_Names]:
    # Member identifiers are the C++ enumerators: the names with '-' as '_'.
    members = [(name.replace("-", "_"), name) for name in _core.name_table(table)]
    out = _Names(cls, members, module=__name__, qualname=cls)
    _NUMBERS[cls] = {member: number for number, member in enumerate(out)}  # type: ignore[var-annotated]
    return out  # type: ignore[return-value]


#: What an image is: cubin, ptx, lto-ir, old-cubin, code-object, bitcode, fatbin, spirv,
#: object, host, empty, unknown.
ImageKind = _enum("ImageKind", "image")
#: What a kernel's static hash covers: ir, cubin, ptx, code-object, unknown.
CodeKind = _enum("CodeKind", "code")
#: A target's family: cuda, amdgpu, host, none.
TargetKind = _enum("TargetKind", "target")
#: A device allocation's kind: device, managed, host-pinned, global, unknown.
AllocationKind = _enum("AllocationKind", "allocation")

#: What a runtime-constant argument is (kir_jit_arg.kind): scalar, array, object.
JitArgKind = _enum("JitArgKind", "jit-arg")
#: The container format device code is found in: cuda-fatbin, offload-bundle, object-bundle,
#: offload-binary, bitcode-section, device-elf.
ContainerFormat = _enum("ContainerFormat", "container")
#: How stored bytes are compressed: none, lz4, zstd, unknown, zlib.
Codec = _enum("Codec", "codec")


class _ArgTypes(enum.IntEnum):
    """An argument value's type: the ARG record's type byte (kir_arg_type, KIR_ARG_*),
    an int whose name is the core's ("f64", "bool")."""

    def __str__(self) -> str:
        return self.name

    def __format__(self, spec: str) -> str:
        return format(self.name, spec)

    @property
    def size(self) -> int | None:
        """The value's size in bytes; None for `bytes` (an object's: no fixed size)."""
        return _ARG_TYPES[self][0] or None

    @property
    def struct_format(self) -> str | None:
        """The value's little-endian `struct` format ("<e" for f16); None for bf16 and bytes."""
        return _ARG_TYPES[self][1]


#: value -> (size, struct format), from the core (kir/model.hpp)
_ARG_TYPES = {value: (size, fmt) for value, _, size, fmt in _core.arg_types()}
#: kir_arg_type: i8 i16 i32 i64 u8 u16 u32 u64 f16 bf16 f32 f64 ptr bytes bool (values 1..15).
ArgType = _ArgTypes("ArgType", [(name, value) for value, name, _, _ in _core.arg_types()],  # type: ignore[misc]
                    module=__name__, qualname="ArgType")


def arg_type(value) -> "ArgType | int":
    """An ArgType from a member, its value or its name; a number that is no ArgType
    stays the number (kir_jit_key reports it); another name raises OptionError (a ValueError)."""
    if isinstance(value, ArgType):
        return value
    if isinstance(value, str):
        try:
            return ArgType[value]
        except KeyError:
            raise OptionError(f"{value!r} is not an argument type (one of "
                             f"{', '.join(t.name for t in ArgType)})") from None
    number = int(getattr(value, "value", value))
    return ArgType(number) if number in ArgType._value2member_map_ else number


def jit_arg_kind(value) -> "JitArgKind | int":
    """A JitArgKind from a member, its name or its number (kir_jit_arg_kind); a number
    that is none stays the number (kir_jit_key reports it)."""
    if isinstance(value, str):
        return JitArgKind(value)
    number = int(value)
    kinds = list(JitArgKind)
    return kinds[number] if 0 <= number < len(kinds) else number


def _number(value) -> int:
    return value.number if isinstance(value, _Names) else int(value)


@dataclass
class Param:
    """One kernel parameter's place in the parameter buffer: every kernel kir
    describes (a device image's, a record's, the hook layer's) lists these."""
    ordinal: int    #: 0-based position in the signature
    offset: int     #: byte offset in the parameter buffer
    size: int       #: size in bytes

    def __repr__(self) -> str:
        return f"Param(ordinal={self.ordinal}, offset={self.offset}, size={self.size})"


@dataclass
class JitArg:
    """A kernel's runtime-constant argument (kir_jit_arg, kir/kir.h): what the hook
    captured from the Proteus ABI, what a record lists (kernel.jit_args) and what
    kir.hashing.jit_key_of_launch reads. `kind` and `type` are members when they
    name one (a number that does not stays a number, for kir_jit_key to refuse)."""
    position: int           #: 1-based parameter position
    kind: JitArgKind | int  #: scalar, array, object or vector
    type: ArgType | int     #: the scalar's, an array's elements' (bytes for objects)
    by_value: bool = False  #: objects: passed by value; arrays: elements in the argument's own bytes
    count: int = 0          #: constant-size arrays: element count; objects: size in bytes
    count_type: ArgType | int = 0  #: run-time-size arrays: type of the argument holding the count
    count_position: int = 0  #: run-time-size arrays: its 1-based position; 0 when `count` is constant

    def __post_init__(self) -> None:
        self.kind = jit_arg_kind(self.kind)
        self.type = arg_type(self.type)
        self.count_type = arg_type(self.count_type)
        self.by_value = bool(self.by_value)

    def c_fields(self) -> tuple[int, int, int, bool, int, int, int]:
        """As kir_jit_arg's fields, numbers: (position, kind, type, by_value, count,
        count_type, count_position)."""
        return (self.position, _number(self.kind), int(self.type), self.by_value, self.count,
                int(self.count_type), self.count_position)


#: Image kinds whose kernels kir decodes (device code: cubin, PTX, AMDGPU code objects).
CODE_IMAGES = frozenset(k for k in ImageKind if _core.code_kind_of(k) is not CodeKind.unknown)

__all__ = ["AllocationKind", "arg_type", "ArgType", "Codec", "CODE_IMAGES", "CodeKind", "ContainerFormat",
           "ImageKind", "jit_arg_kind", "JitArg", "JitArgKind", "Param", "TargetKind"]
