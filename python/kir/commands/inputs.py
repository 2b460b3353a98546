"""Several inputs per call (`kir inspect a.so b.so`, `kir inspect -r DIR`): what
`kir inspect`, `kir hash` and `kir extract` share.

A named file is always read (and an error if kir cannot read it). A directory
is an error without `-r/--recursive`; with it, its tree is walked in name
order: regular files only (FIFOs, devices and sockets are never opened),
only those whose first bytes are a format kir reads (ELF, ar archive, CUDA
fatbin, clang offload bundle, LLVM offloading binary: everything else is
skipped quietly), each file once however many links reach it (a library's
`libfoo.so -> libfoo.so.1` symlinks name it once, under its first path), and
symbolic links to directories followed only into directories not yet visited
(no loop is walked twice)."""
from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from typing import NamedTuple

from kir.errors import OptionError

#: The first bytes of the formats Binary.open reads (libkir/core/binary.cpp, read_file).
MAGICS = (b"\x7fELF", b"!<arch>\n", b"!<thin>\n", b"\x50\xed\x55\xba", b"__CLANG_OFFLOAD_BUNDLE__", b"CCOB",
          b"\x10\xff\x10\xad")


def add_scan_arguments(parser) -> None:
    """--scan and --sections-only: how far Binary.open looks (open_binary)."""
    parser.add_argument("--scan", action="store_true",
                        help="also find containers of every format by magic anywhere in the file")
    parser.add_argument("--sections-only", action="store_true",
                        help="read only what sections and wrappers name: skip the search of data "
                             "sections (.rodata, .data, .ldata) for fatbins, where libraries such as "
                             "cuFFT embed them")


def open_binary(path: str, args):
    """Binary.open as add_scan_arguments's options ask."""
    from kir.binary import Binary
    return Binary.open(path, scan=getattr(args, "scan", False),
                       scan_data=not getattr(args, "sections_only", False))


class Input(NamedTuple):  # not a dataclass: `dataclasses` imports `inspect`, 6 ms of every verb's start-up
    path: str
    explicit: bool      # named on the command line (not found by walking a directory)
    root: str = ""      # the directory walked to find it ("" when explicit)


def add_arguments(parser, nargs: str = "+", help: str = "executable, shared library, object, archive or "
                  "fatbin (several may be given)") -> None:
    parser.add_argument("binaries", nargs=nargs, metavar="BINARY", help=help)
    parser.add_argument("-r", "--recursive", action="store_true",
                        help="walk directories given as input (a site-packages, a Spack prefix): every "
                             "file kir can read, each once; other files are skipped quietly")


def looks_like_binary(path: str) -> bool:
    """Whether the file starts like a format kir reads (unreadable, or no longer a
    regular file: False; opened without blocking, kir.files)."""
    from kir.errors import KirError
    from kir.files import open_regular, read_exactly
    try:
        fd, size = open_regular(path, path)
    except KirError:
        return False
    try:
        head = read_exactly(fd, 0, min(size, 24), path)
    except KirError:
        return False
    finally:
        os.close(fd)
    return any(head.startswith(m) for m in MAGICS)


def expand(paths: list[str], recursive: bool) -> Iterator[Input]:
    """The files to read, in order: each named file; each file found under a named
    directory (with `recursive`; without it a directory is an OptionError)."""
    seen_files: set[tuple[int, int]] = set()
    seen_dirs: set[tuple[int, int]] = set()
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            yield Input(path, True)  # opening it says why it cannot be read
            continue
        if not stat.S_ISDIR(st.st_mode):
            seen_files.add((st.st_dev, st.st_ino))
            yield Input(path, True)
            continue
        if not recursive:
            raise OptionError(f"{path}: is a directory (give -r/--recursive to read the files under it)")
        yield from walk(path, path, seen_files, seen_dirs)


def walk(root: str, directory: str, seen_files: set, seen_dirs: set) -> Iterator[Input]:
    try:
        st = os.stat(directory)
    except OSError:
        return
    if (st.st_dev, st.st_ino) in seen_dirs:  # a link back up the tree, or a second way in
        return
    seen_dirs.add((st.st_dev, st.st_ino))
    try:
        names = sorted(os.listdir(directory))
    except OSError:
        return  # a directory we may not read holds nothing we could read
    for name in names:
        path = os.path.join(directory, name)
        try:
            st = os.stat(path)  # follows links: a dangling one is skipped
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode):
            yield from walk(root, path, seen_files, seen_dirs)
        elif stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) not in seen_files:
            seen_files.add((st.st_dev, st.st_ino))
            if looks_like_binary(path):
                yield Input(path, False, root)


__all__ = ["add_arguments", "expand", "Input", "looks_like_binary", "MAGICS", "walk"]
