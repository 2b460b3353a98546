"""kir's compile service: the JIT client's misses compiled out of the app's process
(docs/jit.md, "Compiling on a miss").

`kir run` starts it before the app (`start`) and stops it when the app has ended;
it also ends by itself when `kir run` dies (PR_SET_PDEATHSIG, and a watchdog on
its parent's pid), so it never outlives the app's run. It listens on a Unix
socket in a private (0700) directory of its own and serves only its own user
(SO_PEERCRED). libkir_jit.so (libkir/jit/client.cpp) opens one connection per
request, so a forked child never shares its parent's.

A request: frames of an 8-byte little-endian length and the bytes — a JSON header
(key, kernel, arch (CUDA "sm_90"; HIP the target-id of the kernel's code object, e.g.
"gfx90a:xnack+", which kir.jit.compile compiles into an AMDGPU code object), static_hash, args [[position, kir_arg_type, hex bytes,
kir_jit_arg_kind]...] (the values the client's kir_jit_key hashed), captures
[[lambda, slot, offset, kir_arg_type, hex bytes]...], grid, block, bounds,
shared_bytes, modules, wait), then each LLVM IR module
(kir_hook_kernel_ir). The answer: one frame, "STATUS MESSAGE", STATUS one of
ok (the cache holds the key), failed (it cannot be compiled: the client stops
asking for it), queued / pending (async: compiling), full (the queue is full: the
original runs), error (anything else).

A compile (in one of `workers` processes: the number of compiles at a time) is
`kir.jit.compile` + `kir.jit.store` into the `kir.cache.Cache`, under a lock per
key shared by every process using the cache directory (flock on DIR/.jit/locks/KEY;
the cache is looked up again once it is held, so each key is compiled once across
MPI ranks or hosts sharing the directory). The compiled code's key
(`kir.jit.jit_key`) must be the client's: a mismatch is an error, logged, and
nothing is stored. A compile that fails is remembered as a negative entry,
DIR/.jit/failed/KEY (JSON: kir version, kernel, arch, message), created and
trusted under the cache's rules (docs/cache.md): other processes answer it
without compiling; an entry written by another kir version is ignored.
"""
from __future__ import annotations

import contextlib
import ctypes
import fcntl
import grp
import json
import os
import pickle
import queue as queues
import secrets
import signal
import socket
import socketserver
import stat
import struct
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from dataclasses import asdict
from pathlib import Path

from kir.errors import KirError, PermissionRefusedError

__all__ = ["STATE", "Running", "State", "compile_job", "main", "start"]

PROTOCOL = 1
STATE = ".jit"  #: DIR/.jit: the JIT's state beside the cache's entries (docs/cache.md)
MAX_HEADER = 1 << 20
MAX_MODULE = 1 << 30
LOG_LINES = 32  #: result lines the service writes, then only a count
_LENGTH = struct.Struct("<Q")


def _group_id(group: str | None) -> int | None:
    if not group:
        return None
    try:
        return int(group) if group.isdigit() else grp.getgrnam(group).gr_gid
    except KeyError:
        raise KirError(f"KIR_CACHE_GROUP={group}: no such group") from None


def refusal(st: os.stat_result, gid: int | None) -> str:
    """Why a file of the JIT's state is not trusted ('' when it is): the cache's
    rules (docs/cache.md) — owned by you or root (or the cache's group), writable
    by no one else."""
    mode = f"mode {stat.S_IMODE(st.st_mode):04o}"
    group_ok = gid is not None and st.st_gid == gid
    if st.st_mode & stat.S_IWOTH:
        return f"refused: writable by every user ({mode})"
    if st.st_mode & stat.S_IWGRP and not group_ok:
        return f"refused: writable by group {st.st_gid} ({mode})"
    if st.st_uid not in (os.geteuid(), 0) and not group_ok:
        return f"refused: owned by uid {st.st_uid}, not by you (uid {os.geteuid()}) or root"
    return ""


class State:
    """DIR/.jit of one cache directory: `locks/` and `failed/` (negative entries)."""

    def __init__(self, cache_dir: str | Path, group: str | None = None) -> None:
        from kir.cache import Cache
        self.cache = Cache(cache_dir, group=group or None)  # creates and checks the cache directory
        self.path = Path(self.cache.directory) / STATE
        self.gid = _group_id(group)
        top = os.open(self.cache.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            state = self._directory(top, STATE, self.path)
        finally:
            os.close(top)
        try:
            self.locks = self._directory(state, "locks", self.path / "locks")
            self.failed = self._directory(state, "failed", self.path / "failed")
        finally:
            os.close(state)

    def _file_mode(self) -> int:
        return 0o660 if self.gid is not None else 0o600

    def _directory(self, parent: int, name: str, path: Path) -> int:
        """`name` under `parent`, created private (0700; 02770 for a group), never
        through a link; refused unless trusted."""
        try:
            os.mkdir(name, 0o700, dir_fd=parent)
            created = True
        except FileExistsError:
            created = False
        try:
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
        except OSError as error:
            raise PermissionRefusedError(f"{path}: refused: not a directory ({error.strerror})") from None
        if created:  # whatever the umask
            if self.gid is not None:
                os.fchown(fd, -1, self.gid)
            os.fchmod(fd, 0o2770 if self.gid is not None else 0o700)
        why = refusal(os.fstat(fd), self.gid)
        if why:
            os.close(fd)
            raise PermissionRefusedError(f"{path}: {why}")
        return fd

    @contextlib.contextmanager
    def lock(self, key: str):
        """The key's lock, held by one process at a time (flock; a lock file
        removed by its holder while another waited is opened again)."""
        while True:
            fd = os.open(key, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, self._file_mode(),
                         dir_fd=self.locks)
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                now = os.stat(key, dir_fd=self.locks, follow_symlinks=False)
            except FileNotFoundError:
                now = None
            held = os.fstat(fd)
            if now is not None and (now.st_ino, now.st_dev) == (held.st_ino, held.st_dev):
                break
            os.close(fd)
        try:
            yield
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(key, dir_fd=self.locks)
            os.close(fd)

    def failure(self, key: str) -> str | None:
        """The message of the key's negative entry, None when there is none (or it
        is not trusted, damaged, or another kir version's)."""
        from kir import __version__
        try:
            fd = os.open(key, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self.failed)
        except OSError:
            return None
        try:
            if refusal(os.fstat(fd), self.gid):
                return None
            with os.fdopen(os.dup(fd), "rb") as f:
                record = json.loads(f.read(1 << 20))
        except (OSError, ValueError):
            return None
        finally:
            os.close(fd)
        if not isinstance(record, dict) or record.get("kir") != __version__:
            return None
        return str(record.get("message", ""))

    def remember_failure(self, key: str, header: dict, message: str) -> None:
        """Write the key's negative entry (atomically: a temporary renamed into place)."""
        from kir import __version__
        record = {"kir": __version__, "key": key, "kernel": header.get("kernel"), "arch": header.get("arch"),
                  "message": message, "time": time.time()}
        temporary = f".tmp-{key}-{os.getpid()}-{secrets.token_hex(4)}"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     self._file_mode(), dir_fd=self.failed)
        try:
            if self.gid is not None:
                os.fchown(fd, -1, self.gid)
            os.fchmod(fd, self._file_mode())
            os.write(fd, json.dumps(record).encode() + b"\n")
        finally:
            os.close(fd)
        os.rename(temporary, key, src_dir_fd=self.failed, dst_dir_fd=self.failed)


def _specialization(header: dict):
    """The request's values as kir.jit specializes them, each keyed as the client's
    kir_jit_key encoded it (docs/hashing.md): an argument is [position, kir_arg_type,
    hex bytes, kir_jit_arg_kind] (the kir_jit_value the client's key hashed); a scalar
    is specialized as its type, an array, vector or object as its bytes (a constant
    global or a by-value object's bytes) whose ARG record still names the element
    type (ArgValue.key_type). Captures: [lambda, slot, offset, kir_arg_type, hex bytes]."""
    from kir.jit.values import SCALARS, ArgValue, Specialization
    from kir.model import ArgType
    args = []
    for item in header["args"]:
        position, code, value = item[:3]
        kind = item[3] if len(item) > 3 else None
        data = bytes.fromhex(value)
        name = ArgType(code).name
        scalar = kind == 0 if kind is not None else name not in SCALARS or len(data) == SCALARS[name][0]
        if scalar:
            args.append(ArgValue(position, name, data))
        else:
            args.append(ArgValue(position, "bytes", data, key_type=name))
    captures = [(lam, slot, offset, code, bytes.fromhex(value))
                for lam, slot, offset, code, value in header.get("captures") or ()]

    def dims(value):
        return None if value is None else tuple(value)

    return Specialization(args=args, grid=dims(header.get("grid")), block=dims(header.get("block")),
                          bounds=dims(header.get("bounds")), shared_bytes=int(header.get("shared_bytes", 0)),
                          captures=captures)


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text[:2000] or type(error).__name__


def compile_job(cache_dir: str, group: str | None, options: dict, header: dict,
                modules: list[bytes]) -> tuple[str, str]:
    """Compile the request's kernel into the cache (in a worker process): (status, message)."""
    from kir import jit
    from kir.cache import check_key
    from kir.ir import link_bitcode

    key = check_key(header["key"])
    state = State(cache_dir, group)
    with state.lock(key):
        if state.cache.lookup(key) is not None:  # another process compiled it meanwhile
            return "ok", "in the cache"
        remembered = state.failure(key)
        if remembered is not None:
            return "failed", f"{remembered} (remembered: {state.path / 'failed' / key})"
        started = time.perf_counter()
        try:
            module = modules[0] if len(modules) == 1 else link_bitcode(modules)
            compiled = jit.compile(module, header["kernel"], header["arch"], _specialization(header),
                                   jit.Options(**options), static_hash=header["static_hash"])
        except (KirError, RuntimeError, ValueError) as error:  # kir.jit's, llvmlite's: the IR cannot be compiled
            message = _one_line(error)
            state.remember_failure(key, header, message)
            return "failed", message
        refusal = jit.own_globals_refusal(compiled)
        if refusal is not None:  # the original runs; remembered, as a compile that failed
            state.remember_failure(key, header, refusal)
            return "failed", refusal
        got = jit.jit_key(compiled)
        if got != key:
            return "mismatch", (f"the compiled code's JIT key is {got}, the client's {key}: nothing stored "
                                "(the client's settings and the service's options differ, or a bug)")
        jit.store(compiled, state.cache)
        return "ok", f"compiled in {time.perf_counter() - started:.3f} s"


#: How a compile process starts: the current directory leaves the import path first.
WORKER = "import sys\nif sys.path[:1] == ['']: del sys.path[0]\nfrom kir.jit.service import worker_main\nworker_main()\n"


def worker_main() -> None:
    """A compile process: jobs from stdin, answers to stdout (each an 8-byte length and a
    pickle, only between the service and the process it started), until stdin closes.
    A job is None (start kir's LLVM worker now: the first miss need not wait for it) or
    compile_job's arguments."""
    _die_with_parent(signal.SIGKILL)
    jobs = os.fdopen(os.dup(0), "rb")
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever prints goes to stderr, never into the answers
    while len(head := jobs.read(_LENGTH.size)) == _LENGTH.size:
        job = pickle.loads(jobs.read(_LENGTH.unpack(head)[0]))
        try:
            if job is None:
                from kir import _irworker
                _irworker.call("os:getpid")
                answer = ("ok", "warm")
            else:
                answer = compile_job(*job)
        except Exception as error:  # noqa: BLE001 - a bug or an I/O error: the client runs the original
            answer = ("error", _one_line(error))
        data = pickle.dumps(answer)
        answers.write(_LENGTH.pack(len(data)) + data)
        answers.flush()


class _Process:
    """One compile process, started on first use and again after it died."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None

    def run(self, job) -> tuple[str, str]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen([sys.executable, "-c", WORKER], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE)
        data = pickle.dumps(job)
        try:
            self.proc.stdin.write(_LENGTH.pack(len(data)) + data)
            self.proc.stdin.flush()
            head = self.proc.stdout.read(_LENGTH.size)
            if len(head) == _LENGTH.size:
                return pickle.loads(self.proc.stdout.read(_LENGTH.unpack(head)[0]))
        except OSError:
            pass
        self.kill()
        return "error", "the compile process died"

    def kill(self) -> None:
        if self.proc is not None:
            with contextlib.suppress(OSError):
                self.proc.kill()
            self.proc = None


def _die_with_parent(sig: int) -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, int(sig), 0, 0, 0)  # PR_SET_PDEATHSIG


class Service:
    def __init__(self, cache_dir: str, options: dict, group: str | None, workers: int, queue: int) -> None:
        self.cache_dir, self.options, self.group, self.queue = cache_dir, options, group, queue
        self.jobs: queues.SimpleQueue = queues.SimpleQueue()
        self.processes = [_Process() for _ in range(workers)]
        self.pending: dict[str, Future] = {}
        self.mismatched: dict[str, str] = {}
        self.lock = threading.Lock()
        self.logged = 0
        State(cache_dir, group)  # the state directories, checked now: a refusal is said at start

    def start_workers(self) -> None:
        """One thread per compile process: each starts its process (and its LLVM worker) now."""
        for process in self.processes:
            threading.Thread(target=self._work, args=(process,), daemon=True).start()

    def _work(self, process: _Process) -> None:
        process.run(None)
        while True:
            job, future = self.jobs.get()
            result = process.run(job)
            self._done(job[3], result)  # said (and the key no longer pending) before it is answered
            future.set_result(result)

    def stop(self) -> None:
        for process in self.processes:
            process.kill()

    def log(self, line: str) -> None:
        with self.lock:
            self.logged += 1
            if self.logged > LOG_LINES:
                return
        print(f"kir-jit-service: {line}", file=sys.stderr, flush=True)

    def answer(self, header: dict, modules: list[bytes]) -> str:
        key = header["key"]
        with self.lock:
            if key in self.mismatched:
                return f"failed {self.mismatched[key]}"
            future = self.pending.get(key)
            new = future is None
            if new:
                if len(self.pending) >= self.queue:
                    return f"full the compile queue holds {self.queue} kernels"
                future = Future()
                self.jobs.put(((self.cache_dir, self.group, self.options, header, modules), future))
                self.pending[key] = future
        if not header.get("wait", True):
            return "queued" if new else "pending"
        status, message = future.result()
        return f"failed {message}" if status == "mismatch" else f"{status} {message}"

    def _done(self, header: dict, result: tuple[str, str]) -> None:
        key, kernel = header["key"], header["kernel"]
        status, message = result
        with self.lock:
            self.pending.pop(key, None)
            if status == "mismatch":
                self.mismatched[key] = message
        word = {"ok": "compiled", "failed": "failed", "mismatch": "error: key mismatch"}.get(status, "error")
        self.log(f"{word} {kernel} key={key} for {header['arch']}: {message}")


def _receive(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(min(size - len(data), 1 << 20))
        if not chunk:
            raise ConnectionError("the client closed the connection")
        data += chunk
    return bytes(data)


def _frame(sock: socket.socket, limit: int) -> bytes:
    (size,) = _LENGTH.unpack(_receive(sock, _LENGTH.size))
    if size > limit:
        raise ValueError(f"a frame of {size} bytes (at most {limit})")
    return _receive(sock, size)


def _check_header(header) -> dict:
    if not isinstance(header, dict) or header.get("protocol") != PROTOCOL:
        raise ValueError(f"not a protocol {PROTOCOL} request")
    for name, kind in (("key", str), ("kernel", str), ("arch", str), ("static_hash", str), ("args", list),
                       ("modules", int)):
        if not isinstance(header.get(name), kind):
            raise ValueError(f"the request's {name!r} is missing or not a {kind.__name__}")
    if not 1 <= header["modules"] <= 1024:
        raise ValueError(f"{header['modules']} IR modules")
    return header


def _handler(service: Service):
    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            sock: socket.socket = self.request
            sock.settimeout(60)
            try:
                uid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]
                if uid not in (os.geteuid(), 0):
                    raise PermissionError(f"a client of uid {uid}")
                header = _check_header(json.loads(_frame(sock, MAX_HEADER)))
                modules = [_frame(sock, MAX_MODULE) for _ in range(header["modules"])]
                sock.settimeout(None)
                reply = service.answer(header, modules)
            except (OSError, ValueError, ConnectionError) as error:
                reply = f"error bad request: {_one_line(error)}"
            data = reply.encode()[:65536]
            with contextlib.suppress(OSError):
                sock.sendall(_LENGTH.pack(len(data)) + data)

    return Handler


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def serve(socket_path: str, cache_dir: str, options: dict, group: str | None, workers: int, queue: int,
          parent: int) -> None:
    _die_with_parent(signal.SIGTERM)
    service = Service(cache_dir, options, group, workers, queue)
    server = _Server(socket_path, _handler(service))
    os.chmod(socket_path, 0o600)

    def stop(*_):
        service.stop()
        with contextlib.suppress(OSError):
            os.unlink(socket_path)
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # ^C goes to the app; `kir run` stops the service after it

    def watchdog() -> None:  # the parent gone (PR_SET_PDEATHSIG missed it): stop
        while os.getppid() == parent:
            time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watchdog, daemon=True).start()
    print("ready", flush=True)
    service.start_workers()
    server.serve_forever()


class Running:
    """A started service: `environment` for the client, `stop()` when the app has ended."""

    def __init__(self, process, directory: str, socket_path: str) -> None:
        self.process, self.directory, self.socket = process, directory, socket_path

    @property
    def environment(self) -> dict[str, str]:
        return {"KIR_JIT_SERVICE": self.socket}

    def stop(self) -> None:
        import shutil
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except Exception:  # noqa: BLE001
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


def start(cache_dir: str | Path, options, *, group: str | None = None, workers: int = 1,
          queue: int = 64) -> Running:
    """Start the service for `cache_dir` and `options` (kir.jit.Options); returns
    when it listens. KirError when it cannot start."""
    import select
    import subprocess
    import tempfile
    if workers < 1 or queue < 1:
        raise KirError(f"compile service: {workers} workers, queue {queue}: expected >= 1 each")
    directory = tempfile.mkdtemp(prefix="kir-jit-")  # mode 0700
    socket_path = os.path.join(directory, "compile.sock")
    if len(socket_path.encode()) >= 100:  # sockaddr_un holds 108 bytes: a long $TMPDIR cannot name it
        os.rmdir(directory)
        directory = tempfile.mkdtemp(prefix="kir-jit-", dir="/tmp")
        socket_path = os.path.join(directory, "compile.sock")
    command = [sys.executable, "-c", "import sys\nif sys.path[:1] == ['']: del sys.path[0]\n"
               "from kir.jit.service import main\nmain()\n",
               "--socket", socket_path, "--cache", str(cache_dir), "--options", json.dumps(asdict(options)),
               "--group", group or "", "--workers", str(workers), "--queue", str(queue),
               "--parent", str(os.getpid())]
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    ready, _, _ = select.select([process.stdout], [], [], 60)
    line = process.stdout.readline() if ready else b""
    if line.strip() != b"ready":
        with contextlib.suppress(OSError):
            process.kill()
        process.wait()
        import shutil
        shutil.rmtree(directory, ignore_errors=True)
        raise KirError("the compile service did not start (its error is above)")
    process.stdout.close()
    return Running(process, directory, socket_path)


def main(argv: list[str] | None = None) -> None:
    import argparse
    parser = argparse.ArgumentParser(prog="kir.jit.service")
    parser.add_argument("--socket", required=True)
    parser.add_argument("--cache", required=True)
    parser.add_argument("--options", required=True)
    parser.add_argument("--group", default="")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--queue", type=int, default=64)
    parser.add_argument("--parent", type=int, required=True)
    args = parser.parse_args(argv)
    options = json.loads(args.options)
    options["assembler_options"] = tuple(options.get("assembler_options", ()))
    try:
        serve(args.socket, args.cache, options, args.group or None, args.workers, args.queue, args.parent)
    except KirError as error:
        print(f"kir-jit-service: error: {error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
