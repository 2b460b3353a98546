"""Client descriptors (docs/jit.md, "Declaring a client"): how a JIT client derives its
key, kept in the cache directory as DIR/.jit/clients/NAME.json, so that `kir tune
--jit-cache DIR` can store a tuned winner under the key of every client that uses DIR.

A descriptor names the client's CONFIG records (what kir_jit_config_records encodes,
kir.jit.Options.config() for the reference client), its specialization (argument
values, grid, block, launch bounds) and the code kind it loads. `kir run` declares the
reference client's when it starts; another client (examples/proteus_client) writes its
own in the same format."""
from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from kir.errors import OptionError

__all__ = ["SCHEMA", "ClientDescriptor", "declare", "declared", "reference"]

SCHEMA = "kir.jit-client/1"
DIRECTORY = "clients"  #: under DIR/.jit
MAX_BYTES = 1 << 16
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


@dataclass(frozen=True)
class ClientDescriptor:
    name: str
    config: tuple[tuple[str, bytes], ...]      #: the CONFIG records, in order
    specialize_args: bool = True
    specialize_grid: bool = False
    specialize_block: bool = False
    bounds: tuple[int, int] | str | None = None  #: (MAXT, MINB), "launch" (the launch's block size), None
    kind: str = "cubin"                         #: the code kind it loads: cubin or ptx

    def to_json(self) -> dict:
        return {"format": SCHEMA, "name": self.name, "config": [[k, v.hex()] for k, v in self.config],
                "specialize": {"args": self.specialize_args, "grid": self.specialize_grid,
                               "block": self.specialize_block,
                               "bounds": list(self.bounds) if isinstance(self.bounds, tuple) else self.bounds},
                "kind": self.kind}

    @classmethod
    def from_json(cls, data, where: str) -> ClientDescriptor:
        if not isinstance(data, dict) or data.get("format") != SCHEMA:
            raise OptionError(f"{where}: not a {SCHEMA} descriptor")
        name = data.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise OptionError(f"{where}: name {name!r}: expected [A-Za-z0-9._-], up to 100 characters")
        config = data.get("config")
        if not isinstance(config, list):
            raise OptionError(f"{where}: config: expected a list of [KEY, HEX]")
        items = []
        for i, item in enumerate(config):
            if not (isinstance(item, list) and len(item) == 2 and all(isinstance(x, str) for x in item)):
                raise OptionError(f"{where}: config[{i}]: expected [KEY, HEX]")
            try:
                items.append((item[0], bytes.fromhex(item[1])))
            except ValueError:
                raise OptionError(f"{where}: config[{i}]: {item[1]!r} is not hex") from None
        spec = data.get("specialize", {})
        if not isinstance(spec, dict):
            raise OptionError(f"{where}: specialize: expected an object")
        flags = {}
        for flag, default in (("args", True), ("grid", False), ("block", False)):
            flags[flag] = spec.get(flag, default)
            if not isinstance(flags[flag], bool):
                raise OptionError(f"{where}: specialize.{flag}: expected true or false")
        bounds = spec.get("bounds")
        if isinstance(bounds, list) and len(bounds) == 2 and all(type(b) is int for b in bounds) \
                and bounds[0] > 0 and bounds[1] >= 0:
            bounds = (bounds[0], bounds[1])
        elif bounds not in (None, "launch"):
            raise OptionError(f"{where}: specialize.bounds {bounds!r}: expected null, \"launch\" or [MAXT, MINB]")
        kind = data.get("kind", "cubin")
        if kind not in ("cubin", "ptx"):
            raise OptionError(f"{where}: kind {kind!r}: expected cubin or ptx")
        return cls(name, tuple(items), flags["args"], flags["grid"], flags["block"], bounds, kind)


def reference(options=None, *, specialize_grid: bool = False, specialize_block: bool = False,
              bounds: tuple[int, int] | None = None, launch_bounds: bool = False,
              specialize_args: bool = True) -> ClientDescriptor:
    """The reference client's descriptor for `kir run`'s settings (client_environment's
    arguments). Its name is kir-run-<12 hex digits of the settings>: one file per
    configuration the cache was run with."""
    from kir.jit import Options
    options = options or Options()
    d = ClientDescriptor("kir-run", tuple(options.config()), specialize_args, specialize_grid, specialize_block,
                         "launch" if launch_bounds else bounds, options.kind)
    digest = hashlib.sha256(json.dumps(d.to_json(), sort_keys=True).encode()).hexdigest()[:12]
    return ClientDescriptor(f"kir-run-{digest}", *[getattr(d, f) for f in
                                                    ("config", "specialize_args", "specialize_grid",
                                                     "specialize_block", "bounds", "kind")])


def _state(cache_dir, group: str | None):
    from kir.jit.service import State
    return State(cache_dir, group)


def declare(cache_dir, descriptor: ClientDescriptor, group: str | None = None) -> Path:
    """Write DIR/.jit/clients/NAME.json atomically (a temporary renamed into place), under
    docs/cache.md's ownership and permission rules (kir.jit.service.State). Its path."""
    state = _state(cache_dir, group)
    top = os.open(state.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        fd = state._directory(top, DIRECTORY, state.path / DIRECTORY)
    finally:
        os.close(top)
    try:
        temporary = f".tmp-{descriptor.name}-{os.getpid()}-{secrets.token_hex(4)}"
        out = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                      state._file_mode(), dir_fd=fd)
        try:
            if state.gid is not None:
                os.fchown(out, -1, state.gid)
            os.fchmod(out, state._file_mode())
            os.write(out, json.dumps(descriptor.to_json(), sort_keys=True).encode() + b"\n")
        finally:
            os.close(out)
        os.rename(temporary, f"{descriptor.name}.json", src_dir_fd=fd, dst_dir_fd=fd)
    finally:
        os.close(fd)
    return state.path / DIRECTORY / f"{descriptor.name}.json"


def declared(cache_dir, group: str | None = None) -> tuple[list[ClientDescriptor], list[str]]:
    """The descriptors in DIR/.jit/clients (by name), and one warning per file passed by
    (untrusted, a link, damaged)."""
    from kir.jit.service import refusal
    path = Path(cache_dir) / ".jit" / DIRECTORY
    if not path.is_dir():
        return [], []
    state = _state(cache_dir, group)
    found, warnings = [], []
    for file in sorted(path.glob("*.json")):
        try:
            fd = os.open(file, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as error:
            warnings.append(f"{file}: passed by: {error.strerror}")
            continue
        try:
            why = refusal(os.fstat(fd), state.gid)
            if why:
                warnings.append(f"{file}: passed by: {why}")
                continue
            with os.fdopen(os.dup(fd), "rb") as f:
                text = f.read(MAX_BYTES + 1)
            if len(text) > MAX_BYTES:
                raise OptionError(f"{file}: passed by: larger than {MAX_BYTES} bytes")
            try:
                data = json.loads(text)
            except ValueError as error:
                raise OptionError(f"{file}: passed by: not JSON ({error})") from None
            found.append(ClientDescriptor.from_json(data, str(file)))
        except OptionError as error:
            warnings.append(str(error))
        finally:
            os.close(fd)
    return found, warnings
