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

from kir import _core


class _Names(str, enum.Enum):
    """A member is its name: str() and format() give the name, not 'Class.member'."""

    def __str__(self) -> str:
        return str.__str__(self)

    __format__ = str.__format__


def _enum(cls: str, table: str) -> type[_Names]:
    # Member identifiers are the C++ enumerators: the names with '-' as '_'.
    members = [(name.replace("-", "_"), name) for name in _core.name_table(table)]
    return _Names(cls, members, module=__name__, qualname=cls)  # type: ignore[return-value]


#: What an image is: cubin, ptx, lto-ir, old-cubin, code-object, bitcode, fatbin, spirv,
#: object, host, empty, unknown.
ImageKind = _enum("ImageKind", "image")
#: What a kernel's static hash covers: ir, cubin, ptx, code-object, unknown.
CodeKind = _enum("CodeKind", "code")
#: A target's family: cuda, amdgpu, host, none.
TargetKind = _enum("TargetKind", "target")
#: A device allocation's kind: device, managed, host-pinned, global, unknown.
AllocationKind = _enum("AllocationKind", "allocation")

#: Image kinds whose kernels kir decodes (device code: cubin, PTX, AMDGPU code objects).
CODE_IMAGES = frozenset(k for k in ImageKind if _core.code_kind_of(k) is not CodeKind.unknown)

__all__ = ["AllocationKind", "CODE_IMAGES", "CodeKind", "ImageKind", "TargetKind"]
