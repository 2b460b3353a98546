"""`zig cc` / `zig c++` as CMake's compilers for the manylinux wheels (scripts/build-wheels.sh).

    python zig_cc.py ZIG cc|c++ TARGET ARGS...

runs `ZIG cc|c++ -target TARGET ARGS...`, with one translation: zig's driver rejects
`-Wl,--exclude-libs,ALL`, which kir's hook layer and its clients link with (and the
wheel build adds to every shared object) so that the symbols of the static archives
they link (libkir.a, libzstd.a, ...) stay inside. Here the same is done with a version
script that makes every global symbol those archives define local; symbols of the
link's own objects keep their visibility, as with --exclude-libs. So do the
replaceable operator new/delete that zig's libc++abi defines weakly in every shared
object: exported from an LD_PRELOADed hook layer they would become the whole process's.
"""
from __future__ import annotations

import os
import subprocess
import sys

FLAG = "-Wl,--exclude-libs,ALL"
OPERATORS = ["_Znwm*", "_Znam*", "_ZdlPv*", "_ZdaPv*"]  # operator new, new[], delete, delete[]


def archive_symbols(path: str) -> set[str]:
    out = subprocess.run(["nm", "-g", "--defined-only", "-P", path], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines() if line and not line.endswith(":") and len(line.split()) >= 2}


def main(argv: list[str]) -> None:
    zig, tool, target, *args = argv
    if FLAG in args:
        args = [a for a in args if a != FLAG]
        output = args[args.index("-o") + 1]
        symbols = set()
        for a in args:
            if a.endswith(".a") and os.path.isfile(a):
                symbols |= archive_symbols(a)
        script = output + ".exclude-libs.map"
        lines = [f'    "{s}";' for s in sorted(symbols)] + [f"    {p};" for p in OPERATORS]
        with open(script, "w") as f:
            f.write("{\n  local:\n" + "\n".join(lines) + "\n};\n")
        args.append(f"-Wl,--version-script={script}")
    os.execv(zig, [zig, tool, "-target", target, *args])


if __name__ == "__main__":
    main(sys.argv[1:])
