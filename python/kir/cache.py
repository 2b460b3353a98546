"""The kernel-object cache (docs/cache.md): compiled device code (cubin, PTX, code
object) with its metadata, content-addressed by the JIT key under one directory::

    cache = Cache("/scratch/jit-cache", max_bytes=1 << 30)
    cache.store(key, cubin, "cubin", "sm_90", {"producer": "kir.jit", "kernel": "_Z4axpy..."})
    entry = cache.lookup(key)          # Entry, or None
    entry.code, entry.meta["producer"]

Everything is in the core (libkir, kir/cache.hpp): the entry format, the atomic
writes many processes may make at once, the checks on read, LRU eviction and the
in-memory layer the launch path uses through the C API (kir/cache.h). A damaged
entry is a miss, removed from the directory; `verify()` reports every problem
with its file and byte offset without changing anything. The trust checks are
the core's too (docs/cache.md, "Who may write the cache"): a directory or entry
another user owns, or that others may write, is refused — a lookup raises
KirError naming it, `verify()` reports it — unless the cache is shared with a
group (`group=`, or the KIR_CACHE_GROUP variable the JIT client also reads).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from kir import _core
from kir.errors import KirError, OptionError
from kir.model import ImageKind

FORMAT_VERSION = _core.CACHE_FORMAT_VERSION
#: the code kinds a cache entry holds (their ImageKind values are the entry's numbers, docs/cache.md)
KINDS = tuple(k.value for k in (ImageKind.cubin, ImageKind.ptx, ImageKind.code_object))


@dataclass(frozen=True)
class Entry:
    """One cache entry: its key, code and what it was made from."""
    key: str               #: the JIT key, 32 lowercase hex digits
    code: bytes = field(repr=False)
    kind: str              #: "cubin", "ptx" or "code-object"
    arch: str              #: "sm_90", "gfx90a"
    meta: dict[str, str]   #: key inputs, compile options, resources, producer, version
    size: int              #: bytes of the entry file
    mtime: float           #: last use (the LRU stamp), seconds since the epoch

    @classmethod
    def _from_core(cls, d: dict) -> Entry:
        return cls(key=d["key"], code=d["code"], kind=d["kind"], arch=d["arch"], meta=dict(d["meta"]),
                   size=d["size"], mtime=d["mtime_ns"] / 1e9)


@dataclass(frozen=True)
class Problem:
    """What `verify()` found wrong with one file of the cache directory."""
    path: str
    key: str               #: the key its name claims ("" when the name is not a key)
    message: str           #: what is wrong
    offset: int | None     #: byte offset in the file, when the problem is about a byte
    refused: bool = False  #: not trusted (another user's, writable by others, a link): never read

    def __str__(self) -> str:  # the message names the byte offset when there is one
        return f"{self.path}: {self.message}"


def check_key(key: str) -> str:
    """`key` itself when it is a cache key (a JIT key's 32 lowercase hex digits), else
    OptionError."""
    if not isinstance(key, str) or len(key) != 32 or any(c not in "0123456789abcdef" for c in key):
        raise OptionError(f"not a cache key (32 lowercase hex digits): {key!r}")
    return key


#: The setting that shares a cache with a group (its name or number): the JIT
#: client reads it too.
GROUP_VARIABLE = "KIR_CACHE_GROUP"


class Cache:
    """The cache under `directory` (created unless create=False). With max_bytes,
    every store evicts least-recently-used entries until the directory holds at
    most max_bytes of entries. `group` (default: $KIR_CACHE_GROUP) shares it with
    a group's members; without it only you (and root) may own and write it."""

    def __init__(self, directory: str | Path, max_bytes: int = 0, *, create: bool = True,
                 group: str | None = None) -> None:
        if max_bytes < 0:
            raise OptionError(f"max_bytes must be >= 0, not {max_bytes}")
        if group is None:
            group = os.environ.get(GROUP_VARIABLE, "")
        self._core = _core.Cache(str(directory), max_bytes, create, group)
        self.directory = Path(self._core.directory)

    def lookup(self, key_hex: str) -> Entry | None:
        """The entry of `key_hex`, or None (also when its file was damaged:
        `last_problem` says how; the file is removed). KirError when the entry,
        its shard or the directory is refused (not trusted)."""
        found = self._core.lookup(check_key(key_hex))
        return None if found is None else Entry._from_core(found)

    def store(self, key_hex: str, code: bytes, kind: str, arch: str, meta: dict[str, str] | None = None) -> None:
        """Write an entry (atomically; replaces any entry of that key)."""
        if kind not in KINDS:
            raise OptionError(f"code kind {kind!r}: one of {', '.join(KINDS)}")
        items = list((meta or {}).items())
        for k, v in items:
            if not isinstance(k, str) or not isinstance(v, str):
                raise OptionError(f"metadata must map str to str: {k!r}: {v!r}")
        self._core.store(check_key(key_hex), bytes(code), kind, arch, items)

    def entries(self) -> list[Entry]:
        """Every intact entry, by key (damaged ones are left to `verify`)."""
        return [Entry._from_core(l["entry"]) for l in self._core.list(False) if l["entry"] is not None]

    def remove(self, key_hex: str) -> bool:
        """Remove `key_hex`'s file; True when there was one."""
        return self._core.remove(check_key(key_hex))

    def evict(self, max_bytes: int) -> int:
        """Evict least-recently-used entries down to max_bytes; how many were removed."""
        return self._core.evict(max_bytes)

    def verify(self) -> list[Problem]:
        """Read and check every file; a Problem for each damaged or refused entry,
        refused directory, stale temporary or stray file. Changes nothing."""
        return self.scan()[1]

    def scan(self) -> tuple[list[Entry], list[Problem]]:
        """entries() and verify() from one reading of the directory."""
        listing = self._core.list(True)
        return ([Entry._from_core(l["entry"]) for l in listing if l["entry"] is not None],
                [Problem(path=l["path"], key=l["key"], message=l["problem"], offset=l["offset"],
                         refused=l["refused"])
                 for l in listing if l["problem"]])

    def stats(self) -> dict[str, int]:
        """This handle's counters: hits, memory_hits, misses, errors, evictions, stores."""
        return self._core.stats()

    @property
    def last_problem(self) -> str:
        """The last damaged entry this handle met ("" if none)."""
        return self._core.last_problem


def encode_entry(key_hex: str, code: bytes, kind: str, arch: str, meta: dict[str, str] | None = None) -> bytes:
    """The bytes of an entry file, as the core writes them."""
    return _core.cache_encode_entry(check_key(key_hex), bytes(code), kind, arch, list((meta or {}).items()))


def parse_entry(data: bytes) -> dict:
    """Parse and check an entry file's bytes: {key, kind, arch, meta, code}; KirError
    (what, at which byte offset) when damaged."""
    d = _core.cache_parse_entry(bytes(data))
    d["meta"] = dict(d["meta"])
    return d


__all__ = ["Cache", "Entry", "Problem", "KirError", "encode_entry", "parse_entry", "FORMAT_VERSION", "GROUP_VARIABLE",
           "KINDS"]
