"""Reading a file someone named: an option's file (`kir tune --space`, `kir replay
--baseline`), a Mneme recording's JSON, bitcode and snapshots, kir's own records and
chunks. One way for all of them, so none can hang kir or exhaust its memory:

- the file is opened with O_NONBLOCK (a FIFO's open does not wait for a writer) and
  refused unless fstat says it is a regular file (`not a regular file (fifo)`,
  `(character device)` for /dev/zero, `(directory)`), before anything is read;
- its size, known from fstat, is checked against a cap before it is read, and then
  exactly that many bytes are read (a file growing meanwhile is not followed);
- JSON is parsed as UTF-8 and every way the parser fails is an error naming the file
  and the byte offset: not UTF-8, not JSON, nested too deeply (Python's recursion
  limit), an integer of more digits than Python converts (4300).

Each error is the caller's KirError subclass (OptionError for an option's file:
the CLI prints one line and exits 2), its message starting with `where` (the file,
or the option and the file)."""
from __future__ import annotations

import contextlib
import os
import stat
import sys

from kir.errors import KirError, OptionError

#: The most bytes a JSON file kir reads may hold (an option's file, a Mneme database).
MAX_JSON_BYTES = 64 << 20
#: The most digits of an integer in JSON (Python's own limit on converting text to int).
MAX_INT_DIGITS = 4300


def file_type(mode: int) -> str:
    """What a file that is not regular is, in words."""
    for test, name in ((stat.S_ISDIR, "directory"), (stat.S_ISFIFO, "fifo"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "unknown type"


def open_regular(path, where: str, error: type[KirError] = KirError) -> tuple[int, int]:
    """(descriptor, size) of a regular file, opened read-only without blocking; any
    other kind of file, or one that cannot be opened, raises `error`. The caller
    closes the descriptor."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except FileNotFoundError:
        raise error(f"{where}: missing") from None
    except OSError as e:
        raise error(f"{where}: cannot open: {e.strerror}") from None
    try:
        info = os.fstat(fd)
    except OSError as e:
        os.close(fd)
        raise error(f"{where}: cannot read: {e.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise error(f"{where}: not a regular file ({file_type(info.st_mode)})")
    return fd, info.st_size


def read_exactly(fd: int, offset: int, size: int, where: str, error: type[KirError] = KirError) -> bytes:
    """`size` bytes at `offset`; a file that ends sooner (shrunk meanwhile) raises `error`."""
    parts, done = [], 0
    while done < size:
        try:
            part = os.pread(fd, min(size - done, 1 << 22), offset + done)
        except OSError as e:
            raise error(f"{where}: cannot read: {e.strerror}") from None
        if not part:
            raise error(f"{where}: truncated while being read: {offset + done} bytes, expected {offset + size}")
        parts.append(part)
        done += len(part)
    return b"".join(parts)


def read_file(path, where: str | None = None, cap: int | None = None, error: type[KirError] = KirError) -> bytes:
    """The bytes of a regular file of at most `cap` bytes (None: as large as it is;
    its size is known before anything is read, so nothing is read without end)."""
    where = str(path) if where is None else where
    fd, size = open_regular(path, where, error)
    try:
        if cap is not None and size > cap:
            raise error(f"{where}: {size} bytes, more than the {_size(cap)} this file may hold")
        return read_exactly(fd, 0, size, where, error)
    finally:
        os.close(fd)


def load_json(path, where: str | None = None, cap: int = MAX_JSON_BYTES, error: type[KirError] = OptionError):
    """The JSON value in a regular file of at most `cap` bytes (read_file, then parse_json)."""
    where = str(path) if where is None else where
    return parse_json(read_file(path, where, cap, error), where, error)


def parse_json(data: bytes, where: str, error: type[KirError] = OptionError):
    """A JSON document (UTF-8) as Python values; whatever is wrong with it raises
    `error` with the byte offset where the parser could tell."""
    import json
    try:
        text = data.decode()
    except UnicodeDecodeError as e:
        raise error(f"{where}: byte {e.start}: not UTF-8, so not JSON") from None

    def offset(pos: int) -> int:
        return len(text[:pos].encode())

    def integer(digits: str) -> int:
        if len(digits.lstrip("-")) > MAX_INT_DIGITS:
            raise error(f"{where}: byte {offset(text.find(digits))}: an integer of {len(digits.lstrip('-'))} "
                        f"digits (at most {MAX_INT_DIGITS})")
        return int(digits)

    try:
        return json.loads(text, parse_int=integer)
    except json.JSONDecodeError as e:
        raise error(f"{where}: byte {offset(e.pos)}: not JSON: {e.msg}") from None
    except RecursionError:
        raise error(f"{where}: arrays and objects nested too deeply (more than Python's recursion "
                    "limit) for kir to read") from None


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} bytes"


@contextlib.contextmanager
def stdout_to_stderr(enabled: bool = True):
    """File descriptor 1 pointed at stderr for the block (dup2), then restored: what
    code below Python writes to stdout while it runs (a replayed kernel's device
    printf, flushed by the CUDA driver into fd 1; a library's chatter) stays out of
    output a program reads, such as `--json`. Child processes started inside inherit
    the redirection."""
    if not enabled:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def read_sidecar(path, error: type[KirError]) -> dict[str, dict]:
    """An importer's sidecar (`kir import-mneme`'s mneme-import.json, `kir import-omp`'s
    omp-import.json: what kir records have no field for, by record file name): its
    `records`; {} when there is none; `error` when it is not such a file."""
    from pathlib import Path
    path = Path(path)
    if not path.exists():
        return {}
    doc = load_json(path, error=error)
    if not isinstance(doc, dict) or not isinstance(doc.get("records"), dict):
        raise error(f"{path}: expected an object with a 'records' object")
    return doc["records"]


def write_sidecar(path, schema: str, docs: list[dict], error: type[KirError]) -> None:
    """`docs` (each an importer's Imported.to_json, its `record` the record's path) merged
    into the sidecar at `path` by record file name, written atomically."""
    import json
    from pathlib import Path
    path = Path(path)
    kept = read_sidecar(path, error)
    for doc in docs:
        doc = dict(doc)
        kept[Path(doc.pop("record")).name] = doc
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps({"schema": schema, "records": dict(sorted(kept.items()))}, indent=1) + "\n")
    tmp.replace(path)


__all__ = ["MAX_INT_DIGITS", "MAX_JSON_BYTES", "file_type", "load_json", "open_regular", "parse_json", "read_exactly",
           "read_sidecar", "stdout_to_stderr", "read_file", "write_sidecar"]
