"""`kir cache ls|show|rm|verify DIR`: the kernel-object cache (docs/cache.md).

    kir cache ls DIR              key, kind, arch, size, age, producer, kernel of every entry
    kir cache show DIR KEY        one entry: its metadata (-o FILE writes its code)
    kir cache rm DIR KEY...       remove entries (--all: every entry)
    kir cache verify DIR          check every file; exit 1 when one is damaged or stray

KEY is the full 32-digit key or a prefix of it that names one entry. Exit status:
0 ok, 1 `verify` found problems (damage, or a directory or entry refused by the
trust checks: another user's, or writable by others), 2 bad input (no such
directory, no such key). Text from the entries (arch, metadata) and file names
are printed with control characters escaped (kir.commands.printable)."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from kir.cache import Cache, Entry
from kir.commands.printable import printable
from kir.envelope import add_json_argument, envelope
from kir.errors import KirError, OptionError
from kir.words import plural

SCHEMA = "kir.cache/1"


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="cache_command", required=True, metavar="VERB")
    ls = sub.add_parser("ls", help="list the entries")
    show = sub.add_parser("show", help="show one entry's metadata")
    rm = sub.add_parser("rm", help="remove entries")
    verify = sub.add_parser("verify", help="check every entry (exit 1 when one is damaged)")
    for p in (ls, show, rm, verify):
        p.add_argument("directory", metavar="DIR", help="the cache directory")
        add_json_argument(p, help=f"one JSON object ({SCHEMA})")
    show.add_argument("key", metavar="KEY", help="the entry's key, or a unique prefix of it")
    show.add_argument("-o", "--output", metavar="FILE", help="write the entry's code to FILE")
    rm.add_argument("keys", metavar="KEY", nargs="*", help="keys (or unique prefixes) to remove")
    rm.add_argument("--all", action="store_true", help="remove every entry")


def run(args) -> int:
    if not Path(args.directory).is_dir():
        raise KirError(f"{args.directory}: no such cache directory")
    cache = Cache(args.directory, create=False)
    return {"ls": ls, "show": show, "rm": rm, "verify": verify}[args.cache_command](cache, args)


def age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def kernel_of(entry: Entry) -> str:
    return entry.meta.get("kernel", entry.meta.get("kernel.name", ""))


def as_json(entry: Entry, now: float) -> dict:
    return {"key": entry.key, "kind": entry.kind, "arch": entry.arch, "size": entry.size,
            "code_size": len(entry.code), "mtime": entry.mtime, "age_s": round(now - entry.mtime, 3),
            "meta": entry.meta}


def ls(cache: Cache, args) -> int:
    now = time.time()
    entries, problems = cache.scan()
    entries.sort(key=lambda e: -e.mtime)  # most recently used first
    damaged = [p for p in problems if p.key]
    refused_directories = [p for p in problems if p.refused and not p.key]
    if args.json:
        print(json.dumps(envelope(SCHEMA, directory=str(cache.directory),
                          entries=[as_json(e, now) for e in entries],
                          total_bytes=sum(e.size for e in entries), damaged=len(damaged))))
    else:
        rows = [("key", "kind", "arch", "size", "age", "producer", "kernel")]
        rows += [(e.key, e.kind, printable(e.arch), str(e.size), age(now - e.mtime),
                  printable(e.meta.get("producer", "-")), printable(kernel_of(e) or "-")) for e in entries]
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
        for r in rows:
            print("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1])
        print(f"{plural(len(entries), 'entry')}, {plural(sum(e.size for e in entries), 'byte')} in {printable(str(cache.directory))}")
    for p in refused_directories:
        print(f"kir: warning: {printable(str(p))}: its entries are not listed", file=sys.stderr)
    if damaged:
        print(f"kir: warning: {plural(len(damaged), 'damaged or refused entry')} not listed: run `kir cache verify "
              f"{printable(args.directory)}`", file=sys.stderr)
    return 0


def resolve(entries: list[Entry], key: str) -> Entry:
    """The one entry whose key is `key` or starts with it."""
    if not key or any(c not in "0123456789abcdef" for c in key) or len(key) > 32:
        raise OptionError(f"KEY {key!r}: 1 to 32 lowercase hex digits")
    matches = [e for e in entries if e.key.startswith(key)]
    if not matches:
        raise KirError(f"no entry with key {key}")
    if len(matches) > 1:
        raise OptionError(f"KEY {key} names {len(matches)} entries: give more digits")
    return matches[0]


def show(cache: Cache, args) -> int:
    entry = resolve(cache.entries(), args.key)
    if args.output:
        Path(args.output).write_bytes(entry.code)
    if args.json:
        print(json.dumps(envelope(SCHEMA, directory=str(cache.directory),
                          entry=as_json(entry, time.time()))))
        return 0
    print(f"key        {entry.key}")
    print(f"kind       {entry.kind}")
    print(f"arch       {printable(entry.arch)}")
    print(f"code       {len(entry.code)} bytes")
    print(f"file       {entry.size} bytes, last used {age(time.time() - entry.mtime)} ago")
    for k, v in entry.meta.items():
        print(f"meta       {printable(k)} = {printable(v)}")
    if args.output:
        print(f"code written to {printable(args.output)}")
    return 0


def rm(cache: Cache, args) -> int:
    if args.all == bool(args.keys):
        raise OptionError("give KEY... or --all (not both)")
    entries, problems = cache.scan()
    keys = [e.key for e in entries] if args.all else [resolve(entries, k).key for k in args.keys]
    if args.all:  # damaged entries too
        keys += [p.key for p in problems if p.key and p.key not in keys]
    removed = [k for k in keys if cache.remove(k)]
    if args.json:
        print(json.dumps(envelope(SCHEMA, directory=str(cache.directory),
                          removed=removed)))
    else:
        for k in removed:
            print(f"removed {k}")
    return 0


def verify(cache: Cache, args) -> int:
    entries, problems = cache.scan()
    checked = len(entries)
    if args.json:
        print(json.dumps(envelope(SCHEMA, directory=str(cache.directory),
                          intact=checked,
                          problems=[{"path": p.path, "key": p.key, "message": p.message, "offset": p.offset,
                                        "refused": p.refused} for p in problems])))
    else:
        for p in problems:
            print(printable(str(p)))
        print(f"{plural(checked, 'entry')} intact, {plural(len(problems), 'problem')} in {printable(str(cache.directory))}")
    return 1 if problems else 0


__all__ = ["add_arguments", "age", "as_json", "kernel_of", "ls", "resolve", "rm", "run", "SCHEMA", "show",
           "verify"]
