"""LLVM work on untrusted IR, in a worker process a crash cannot take kir down with.

llvmlite's LLVM keeps its assertions: its bitcode reader aborts (SIGABRT) or
segfaults on some damaged modules instead of returning an error, and its back
end ends the process (`LLVM ERROR: ...`, exit 1) on IR it cannot compile — a
module that reads and verifies can still name a symbol NVPTX cannot print
(issue 21 §9). So everything kir does with LLVM to the IR of its input runs in
a worker: reading modules (`kir.ir.analyse`: parsed, verified, printed, its
names read), printing (`IrModule.text`), compiling (`kir.jit.compile`, also for
`kir replay --code ir`), linking; it parses a module for any of these only after it read
those same bytes whole (`kir.ir.parse_bitcode`). kir's own process parses no
input IR.

One worker per process, started at the first request (`python -c`, the current
directory removed from its import path so that nothing under the caller's
directory is imported; no core dumps), serves every request after it. A request
is one call (`call`) or one function over a list (`map_each`: all the modules
of a binary in one request, answered one by one). A request the worker dies in
(a signal, an exit, or no answer within the time allowed) gives `LLVMCrashError`
saying how, with LLVM's own line from the worker's stderr (the failed
assertion, `LLVM ERROR: ...`), after the answers it gave; the next request
starts a new worker.

The protocol (both ends are this file): each message is an 8-byte little-endian
length and a pickle. The worker first sends its llvmlite's LLVM version; then,
for each request (function "module:name", arguments, how many items when a
map, the caller's environment and directory), ("ok", result) or ("raise",
exception) — one, or one per item. Pickles only cross between kir and the
worker it started, never from a file.
"""
from __future__ import annotations

import atexit
import os
import pickle
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time

from kir.errors import KirError, LLVMCrashError

#: How the parent starts the worker: the current directory leaves the import path first.
CHILD = "import sys\nif sys.path[:1] == ['']: del sys.path[0]\nfrom kir._irworker import main\nmain()\n"
#: Seconds the worker may take to start (Python, llvmlite).
START_SECONDS = 120
#: True in the worker itself: the functions run in place.
IN_WORKER = False
_LENGTH = 8


def call(function: str, *args, timeout: float | None = None):
    """`function` ("kir.module:name") of `args`, run in the worker: its result, or
    the exception it raised; `LLVMCrashError` when the worker died in it (or took
    longer than `timeout` seconds)."""
    if IN_WORKER:
        return _resolve(function)(*args)
    answers, died = _request(function, args, [timeout])
    if died:
        raise died
    status, value = answers[0]
    if status == "raise":
        raise value
    return value


def map_each(function: str, items: list, timeouts: list[float | None]) -> tuple[list, LLVMCrashError | None]:
    """`function` of each item, in the worker, in one request: the answers, each
    ("ok", result) or ("raise", exception), and None; or, when the worker died in
    an item (or took longer than its timeout), the answers before that item and
    how the worker died."""
    if IN_WORKER:
        f = _resolve(function)
        return [_apply(f, item) for item in items], None
    return _request(function, (items,), timeouts, mapped=True)


_worker: _Worker | None = None
_lock = threading.Lock()


def _request(function: str, args: tuple, timeouts: list[float | None],
             mapped: bool = False) -> tuple[list, LLVMCrashError | None]:
    global _worker
    answers: list = []
    with _lock:
        if _worker is None or _worker.owner != os.getpid() or _worker.proc.poll() is not None:
            _worker = _Worker()
        try:
            _worker.request((function, args, len(timeouts) if mapped else 0, dict(os.environ), _directory()),
                            timeouts, answers)
        except LLVMCrashError as died:
            _worker = None
            return answers, died
    return answers, None


def _directory() -> str:
    try:
        return os.getcwd()
    except OSError:
        return "/"


def require_llvmlite() -> None:
    """llvmlite is the `ir` extra (issue 26: 173 MB of a 207 MB install, which `kir
    inspect`, `extract`, `hash` and `diff` never need): without it, what needs LLVM says
    which extra installs it, before any worker starts."""
    from kir.errors import llvmlite_installed, missing_extra
    if not llvmlite_installed():
        raise missing_extra("llvmlite", "ir", "reading or compiling LLVM IR (kir inspect --ir, kir.ir, kir.jit, "
                            "kir replay --code ir, kir tune)")


class _Worker:
    def __init__(self) -> None:
        require_llvmlite()
        self.log = tempfile.TemporaryFile()  # its stderr: where LLVM says why it died
        self.owner = os.getpid()
        self.llvm = "?"
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log)
        try:
            self.llvm = self._receive(START_SECONDS, 0)
        except LLVMCrashError as error:
            raise KirError(f"kir's LLVM worker ({sys.executable} -c ... kir._irworker) did not start: "
                           f"{error}") from None

    def request(self, message, timeouts: list[float | None], answers: list) -> None:
        """Send one request; append its answers to `answers` as they come."""
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            self.proc.stdin.write(len(data).to_bytes(_LENGTH, "little") + data)
            self.proc.stdin.flush()
        except OSError:  # it died: _receive says how
            pass
        log_from = self.log.seek(0, os.SEEK_END)  # an answer may come after the next item's stderr
        for timeout in timeouts:
            answers.append(self._receive(timeout, log_from))

    def _receive(self, timeout: float | None, log_from: int):
        deadline = None if timeout is None else time.monotonic() + timeout
        head = self._read(_LENGTH, deadline, log_from)
        return pickle.loads(self._read(int.from_bytes(head, "little"), deadline, log_from))

    def _read(self, size: int, deadline: float | None, log_from: int) -> bytes:
        out = bytearray()
        fd = self.proc.stdout.fileno()
        while len(out) < size:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([fd], [], [], left)[0]:
                self.stop()
                raise LLVMCrashError(f"llvmlite (LLVM {self.llvm}) did not finish within the time allowed "
                                 "(the worker was stopped)")
            chunk = os.read(fd, min(size - len(out), 1 << 20))
            if not chunk:
                self.proc.wait()
                how = self._death(log_from)
                self.stop()
                raise LLVMCrashError(f"llvmlite (LLVM {self.llvm}) {how}")
            out += chunk
        return bytes(out)

    def _death(self, log_from: int) -> str:
        """How the worker died, in a few words, with LLVM's line from its stderr
        (since the request began)."""
        code = self.proc.returncode
        if code < 0:
            try:
                how = f"crashed ({signal.Signals(-code).name}"
            except ValueError:
                how = f"crashed (signal {-code}"
        else:
            how = f"exited ({code}"
        self.log.seek(log_from)
        lines = [line.strip() for line in self.log.read()[-65536:].decode(errors="replace").splitlines()]
        lines.reverse()  # the last such line is the item's the worker died in
        said = next((line[line.index("Assertion"):] for line in lines if "Assertion" in line), None) or \
            next((line for line in lines if line.startswith("LLVM ERROR")), None) or \
            next((line for line in lines
                  if line and not line.startswith(("#", "Stack dump", "PLEASE", "0.", "1."))), None)
        return how + (f": {said[:300]})" if said else ")")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.log):
            try:
                stream.close()
            except OSError:
                pass


@atexit.register
def _stop_at_exit() -> None:
    if _worker is not None and _worker.owner == os.getpid():
        _worker.stop()


def _resolve(function: str):
    import importlib
    module, name = function.split(":")
    return getattr(importlib.import_module(module), name)


def _apply(function, *args) -> tuple:
    try:
        return "ok", function(*args)
    except Exception as error:  # the caller's to raise: a KirError, or a bug with its message
        return "raise", error


def main() -> None:
    """The worker: answer requests from stdin until it closes."""
    global IN_WORKER
    IN_WORKER = True
    import resource
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a crash here is expected: no core file
    requests = os.fdopen(os.dup(0), "rb")
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # what LLVM or Python prints goes to stderr, never into the answers
    import llvmlite.binding as llvm

    def send(message) -> None:
        try:
            data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError) as error:
            data = pickle.dumps(("raise", RuntimeError(f"{message[1]!r} ({error})")))
        answers.write(len(data).to_bytes(_LENGTH, "little") + data)
        answers.flush()

    send(".".join(map(str, llvm.llvm_version_info)))
    while len(head := requests.read(_LENGTH)) == _LENGTH:
        function, args, mapped, environment, directory = pickle.loads(requests.read(int.from_bytes(head, "little")))
        if os.environ != environment:
            os.environ.clear()
            os.environ.update(environment)
        try:
            os.chdir(directory)
        except OSError:  # the caller's directory is gone: its relative paths are too
            pass
        f = _resolve(function)
        for answer in ((_apply(f, item) for item in args[0]) if mapped else [_apply(f, *args)]):
            send(answer)
