"""Running an app under the hook layer (libkir_hook.so preloaded, clients named in
KIR_HOOK_CLIENTS): what `kir trace`, `kir record` and `kir.record.record_app` share."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


def library(name: str) -> Path:
    """A library of this installation's `lib/` folder (libkir_hook.so, a client)."""
    path = Path(__file__).parent / "lib" / name
    if not path.exists():
        raise OSError(f"{name} is missing from this installation: {path}")
    return path


def hook_library() -> Path:
    return library("libkir_hook.so")


def hooked_environment(clients: list[Path] = ()) -> dict[str, str]:
    """This environment with the hook preloaded (before any LD_PRELOAD already set)
    and the client libraries it should load."""
    env = dict(os.environ)
    env["LD_PRELOAD"] = " ".join(filter(None, [str(hook_library()), env.get("LD_PRELOAD", "")]))
    if clients:
        env["KIR_HOOK_CLIENTS"] = ":".join(str(c) for c in clients)
    return env


def run_app(command: list[str], env: dict[str, str], pass_fds=()) -> int:
    """Run the app to its end; its exit status (128 + N when killed by signal N)."""
    return exit_status(run_app_process(command, env, pass_fds).returncode)


def run_app_process(command: list[str], env: dict[str, str], pass_fds=()) -> subprocess.Popen:
    """Run the app to its end; the finished process (returncode -N when signal N
    killed it, pid for what it left behind)."""
    try:
        proc = subprocess.Popen(command, env=env, pass_fds=pass_fds)
    except OSError as error:
        raise OSError(f"cannot run {command[0]}: {error.strerror}") from None
    finally:
        for fd in pass_fds:
            os.close(fd)
    proc.wait()
    return proc


def finish(app: subprocess.Popen, prefix: str = "kir") -> int:
    """The finished app's exit status as a shell reports it; when a signal killed
    it, one line on stderr says which ("kir: the app was killed by SIGABRT")."""
    if app.returncode < 0:
        print(f"{prefix}: the app was killed by {signal_name(-app.returncode)}", file=sys.stderr)
    return exit_status(app.returncode)


#: What names a GPU runtime in an executable's dynamic string table (DT_NEEDED).
GPU_RUNTIMES = (b"libcudart.so", b"libcuda.so", b"libamdhip64.so")


def uses_gpu(command: list[str]) -> bool:
    """Whether the program `command` runs holds device code or links a GPU runtime: the
    apps for which launching or recording nothing, without a driver, is worth an error
    (`kir record -- sh -c ...` is not one: what its children do is not known here)."""
    import shutil
    path = shutil.which(command[0]) if command else None
    if path is None:
        return False
    try:
        from kir.binary import Binary
        if Binary.open(path).images:
            return True
        with open(path, "rb") as f:
            head = f.read(64 << 20)  # the dynamic string table is near the start
    except (OSError, ValueError, Exception):  # noqa: BLE001 - not a binary kir reads: not a GPU app
        return False
    return any(name in head for name in GPU_RUNTIMES)


def gpu_driver_problem() -> str | None:
    """None when this machine has a CUDA or HIP device a program can use; otherwise why
    not, for both runtimes ("libcuda.so.1: not found; HIP: hipGetDeviceCount: error 100").
    What `kir record` and `kir trace` say when the app launched nothing (issue 26: they
    exited 0 with "recorded 0 launches"). Asked after the app, in a child process; None
    too when the child cannot tell (it died: a library's constructor, a test's stand-in)."""
    try:  # in a child: what a driver library does as it loads (or a stand-in's exit) stays there
        probe = subprocess.run([sys.executable, "-c", _DRIVER_PROBE], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if probe.returncode != 0 or not probe.stdout.startswith(("usable", "problem: ")):
        return None  # it could not tell: nothing is claimed
    return None if probe.stdout.startswith("usable") else probe.stdout.strip().removeprefix("problem: ")


_DRIVER_PROBE = """
import ctypes
count = ctypes.c_int(0)
try:
    cuda = ctypes.CDLL("libcuda.so.1")
except OSError:
    problems = ["libcuda.so.1: not found"]
else:
    error = cuda.cuInit(0)
    if error == 0:
        error = cuda.cuDeviceGetCount(ctypes.byref(count))
    if error == 0 and count.value > 0:
        raise SystemExit(print("usable"))
    problems = [f"CUDA: cuInit: error {error}" if error else "CUDA: no device"]
for name in ("libamdhip64.so", "libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5"):
    try:
        hip = ctypes.CDLL(name)
    except OSError:
        continue
    error = hip.hipGetDeviceCount(ctypes.byref(count))
    if error == 0 and count.value > 0:
        raise SystemExit(print("usable"))
    problems.append(f"HIP: hipGetDeviceCount: error {error}" if error else "HIP: no device")
    break
else:
    problems.append("libamdhip64.so: not found")
print("problem: " + "; ".join(problems))
"""


def exit_status(returncode: int) -> int:
    """A Popen return code as a shell reports it: 128 + N for signal N."""
    return returncode if returncode >= 0 else 128 - returncode


def signal_name(number: int) -> str:
    """'SIGSEGV' for 11; 'signal 42' for one Python does not name."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


__all__ = ["exit_status", "finish", "gpu_driver_problem", "uses_gpu", "hook_library", "hooked_environment", "library", "run_app", "run_app_process",
           "signal_name"]
