"""Launch overhead of the hook layer (needs a GPU): ns per empty-kernel launch,
bare vs under libkir_hook.so with no client, with a no-op client, and (hook API 4)
with a client whose launch_override declines every launch and one that claims
every launch with a substitute — the kernel's own cubin as code, which the layer
loads once and then finds in its per-context cache (the override's hit path);
measured as interleaved pairs; prints the median ratio of each to the bare run of
its pair.

    python benchmarks/hook_overhead.py [--pairs 15] [--launches 200000]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

import kir
from common import pin_to

HERE = Path(__file__).resolve().parent
# Counts the launches it is told about, and says how many at exit: the
# benchmark checks that the hook saw every launch (it measures nothing else).
NOOP_CLIENT = r"""
#include <stdio.h>
#include <kir/hooks.h>
static unsigned long long seen;
static void on_begin(void* u, const kir_hook_launch* l) { (void)u; (void)l; __atomic_fetch_add(&seen, 1, __ATOMIC_RELAXED); }
static void on_done(void* u, const kir_hook_launch* l) { (void)u; (void)l; }
static kir_hook_client client = {sizeof(kir_hook_client), KIR_HOOK_API_VERSION, 0,
                                 0, 0, 0, 0, 0, on_begin, on_done};
const kir_hook_client* kir_hook_client_entry(void) { client.launch_skips = SKIPS; return &client; }
__attribute__((destructor)) static void report(void) { fprintf(stderr, "noop-client launches=%llu\n", seen); }
"""


# MODE 0: declines every launch (the cost of asking); 1: substitutes the kernel's
# own launched image (kept after the first request, a fixed id: the layer's cache
# hit path). Says at exit how many launches it was asked about and how many ran
# substituted (kir_hook_stats.substituted).
OVERRIDE_CLIENT = r"""
#include <stdio.h>
#include <string.h>
#include <kir/hooks.h>
static unsigned long long asked;
static const kir_hook_kernel* known;
static kir_hook_code code;
static int claim(void* u, const kir_hook_launch* l, kir_hook_substitute* s) {
  (void)u; __atomic_fetch_add(&asked, 1, __ATOMIC_RELAXED);
  if (!MODE || !l->kernel) return 0;
  if (l->kernel != known) { if (!kir_hook_kernel_code(l->kernel, KIR_CODE_LAUNCHED, &code)) return 0; known = l->kernel; }
  s->kind = KIR_SUBSTITUTE_CODE; s->code = code.bytes; s->code_size = code.size; s->code_kind = code.kind;
  s->arch = code.arch; s->id.low = 1;
  return 1;
}
static kir_hook_client client;
const kir_hook_client* kir_hook_client_entry(void) {
  client.struct_size = sizeof client; client.api_version = KIR_HOOK_API_VERSION; client.launch_override = claim;
  return &client;
}
__attribute__((destructor)) static void report(void) {
  kir_hook_stats st; memset(&st, 0, sizeof st); st.struct_size = sizeof st; kir_hook_get_stats(&st);
  fprintf(stderr, "override-client asked=%llu substituted=%llu\n", asked, (unsigned long long)st.substituted);
}
"""


def build_override_clients(work: Path) -> tuple[Path, Path]:
    (work / "override.c").write_text(OVERRIDE_CLIENT)
    out = []
    for mode in (0, 1):
        lib = work / f"liboverride{mode}.so"
        subprocess.run(["gcc", "-shared", "-fPIC", f"-DMODE={mode}", "-I", str(Path(kir.__file__).parent / "include"),
                        str(work / "override.c"), "-o", str(lib)], check=True)
        out.append(lib)
    return out[0], out[1]


def build(work: Path) -> tuple[Path, Path, Path]:
    """The app, the no-op client reading everything (launch_skips 0, as an API 4
    client), and the same client skipping what it does not read (API 5)."""
    exe, client, lean = work / "launch", work / "libnoop.so", work / "libnoop_skips.so"
    subprocess.run(["nvcc", "-O2", "-cudart", "shared", "-arch=native", str(HERE / "hook_overhead.cu"),
                    "-o", str(exe)], check=True)
    (work / "noop.c").write_text(NOOP_CLIENT)
    for lib, skips in ((client, "0"), (lean, "KIR_HOOK_SKIP_KERNEL|KIR_HOOK_SKIP_DEVICE")):
        subprocess.run(["gcc", "-shared", "-fPIC", "-I", str(Path(kir.__file__).parent / "include"),
                        f"-DSKIPS={skips}", str(work / "noop.c"), "-o", str(lib)], check=True)
    return exe, client, lean


def ns_per_launch(exe: Path, launches: int, env: dict, cpu: int | None = None) -> float:
    run = subprocess.run([str(exe), str(launches)], capture_output=True, text=True, check=True,
                         env={**os.environ, **env}, preexec_fn=pin_to(cpu))
    if "noop" in env.get("KIR_HOOK_CLIENTS", ""):  # the hook must have seen every launch (1000 warm-up + n)
        seen = run.stderr.split("noop-client launches=")[-1].split()[0]
        if int(seen) != launches + 1000:
            raise SystemExit(f"the hook saw {seen} of {launches + 1000} launches: nothing is measured")
    if "override" in env.get("KIR_HOOK_CLIENTS", ""):  # asked about every launch; mode 1: all substituted
        line = run.stderr.split("override-client ")[-1].split()
        asked, substituted = (int(field.split("=")[1]) for field in line[:2])
        want = 0 if env["KIR_HOOK_CLIENTS"].endswith("override0.so") else launches + 1000
        if asked != launches + 1000 or substituted != want:
            raise SystemExit(f"override client: asked {asked}, substituted {substituted} of {launches + 1000}")
    return float(run.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument("--launches", type=int, default=200000)
    parser.add_argument("--cpu", type=int, default=-1,
                        help="run every process on this CPU alone (default -1: anywhere; pinned, the CUDA "
                             "driver's own threads share the core: on the H200 the pairs moved more, run Z6)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp())
    exe, client, lean = build(work)
    declines, substitutes = build_override_clients(work)
    hook = str(Path(kir.__file__).parent / "lib" / "libkir_hook.so")
    variants = {"hook, no client": {"LD_PRELOAD": hook},
                "hook + no-op client": {"LD_PRELOAD": hook, "KIR_HOOK_CLIENTS": str(client)},
                "hook + no-op client skipping kernel and identity (API 5)": {"LD_PRELOAD": hook,
                                                                             "KIR_HOOK_CLIENTS": str(lean)},
                "hook + override client, declines": {"LD_PRELOAD": hook, "KIR_HOOK_CLIENTS": str(declines)},
                "hook + override client, substitutes (cached code)": {"LD_PRELOAD": hook,
                                                                      "KIR_HOOK_CLIENTS": str(substitutes)}}
    bare, ratios = [], {name: [] for name in variants}
    for _ in range(args.pairs):
        for name, env in variants.items():
            b = ns_per_launch(exe, args.launches, {}, args.cpu)
            h = ns_per_launch(exe, args.launches, env, args.cpu)
            bare.append(b)
            ratios[name].append(h / b)
    where = "anywhere" if args.cpu < 0 else f"each process on CPU {args.cpu}"
    print(f"| launches of an empty kernel ({args.pairs} interleaved pairs x {args.launches}, {where}) | ns/launch "
          "| overhead (median of pair ratios) | pair ratios [min–max] |")
    print("|---|---|---|---|")
    print(f"| bare | {statistics.median(bare):.0f} | - | - |")
    for name, r in ratios.items():
        print(f"| {name} | {statistics.median(bare) * statistics.median(r):.0f} | "
              f"{(statistics.median(r) - 1) * 100:+.2f}% | {(min(r) - 1) * 100:+.2f}% … {(max(r) - 1) * 100:+.2f}% |")


if __name__ == "__main__":
    main()
