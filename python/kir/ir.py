"""The IR layer: every LLVM IR module a binary holds, read with llvmlite.

Modules come from two places (see docs/architecture.md):

- images that are bitcode: `.llvmbc` / `.llvm.lto` sections, RDC offload-bundle
  entries, OpenMP offloading binaries, modules found by `--scan`;
- IR the Proteus pass embedded inside device code: `_jit_bitcode_*` globals in
  cubins, `.jit.bitcode.*` sections of AMDGPU code objects.

For each module: triple, data layout, functions, which are kernels (the
`ptx_kernel` / `amdgpu_kernel` calling conventions), which are JIT-annotated for
Proteus, each kernel's signature (parameter types, store sizes, and the size of
by-value / by-reference pointees — what a recorder needs to copy arguments), and
globals with their sizes. llvmlite's LLVM may be older than the producer's: a
module it cannot read is reported (`IrModule.error`), never raised.

Bitcode is input: llvmlite's LLVM aborts or segfaults on some damaged modules.
So modules are read in kir's LLVM worker process (kir/_irworker.py), which also
prints them (`IrModule.text`) after it read them whole (`parse_bitcode`); a
module that crashed the worker is an unreadable module like any other. kir's own
process parses no input IR.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass, field

from kir.binary import Binary, Image
from kir.errors import KirError
from kir.model import CODE_IMAGES, ImageKind

KERNEL_CALLING_CONVENTIONS = ("ptx_kernel", "amdgpu_kernel", "spir_kernel")
_DEFINE = re.compile(r"^define\s+(?P<head>[^@]*)@(?P<name>\"[^\"]+\"|[\w.$-]+)\((?P<rest>.*)$")
_POINTEE = re.compile(r"\b(byval|byref)\((?P<type>[^)]+)\)")


@dataclass
class IrParam:
    """One parameter of a function's signature, with the sizes a recorder copies."""
    index: int
    type: str                      #: LLVM type, e.g. "i32", "ptr addrspace(1)"
    store_size: int | None         #: bytes the argument itself takes
    pointee_kind: str = ""         #: "byval" / "byref" when passed by value through a pointer
    pointee_type: str = ""
    pointee_size: int | None = None  #: bytes of the by-value object


@dataclass
class IrFunction:
    """A function of a module: a definition or a declaration, a kernel when its calling
    convention is one of KERNEL_CALLING_CONVENTIONS, its parameters and JIT annotation."""
    name: str
    is_declaration: bool
    calling_convention: str = ""
    params: list[IrParam] = field(default_factory=list)
    jit: bool = False              #: annotated for Proteus (annotate("jit", ...) or !proteus.jit)
    #: 1-based positions to specialize, from annotate("jit", ...); None when only !proteus.jit
    #: marks it (the pass deletes @llvm.global.annotations: positions reach Proteus's runtime
    #: from host code, not from this IR).
    jit_args: list[int] | None = field(default_factory=list)
    #: An OpenMP target region's kernel: its region identity (32 hex digits, docs/hashing.md
    #: "OpenMP target regions"), the same in every build of the same source; "" otherwise.
    omp_region: str = ""

    @property
    def is_kernel(self) -> bool:
        """Its calling convention is a kernel's (KERNEL_CALLING_CONVENTIONS)."""
        return self.calling_convention in KERNEL_CALLING_CONVENTIONS


@dataclass
class IrGlobal:
    """A global variable of a module: its LLVM type and size in bytes (None when unknown)."""
    name: str
    type: str
    size: int | None


@dataclass
class IrModule:
    """One LLVM IR module a binary holds: where it was found, its bitcode, and what kir's
    LLVM worker read from it (or why it could not: `error`)."""
    index: int
    source: str                    #: where it was found, for people
    image: int                     #: index of the image it lies in
    embedded: str = ""             #: the Proteus symbol/section name when embedded in device code
    for_kernel: str = ""           #: a Proteus per-kernel module's kernel (HIP RDC/LTO sections)
    bitcode: bytes = b""
    triple: str = ""
    data_layout: str = ""
    functions: list[IrFunction] = field(default_factory=list)
    globals: list[IrGlobal] = field(default_factory=list)
    error: str = ""                #: why llvmlite could not read it ("" when it could)

    @property
    def kernels(self) -> list[IrFunction]:
        """The functions that are kernels."""
        return [f for f in self.functions if f.is_kernel]

    def function(self, name: str) -> IrFunction | None:
        """The function called `name`, or None."""
        return next((f for f in self.functions if f.name == name), None)

    def text(self) -> str:
        """The module as LLVM assembly (.ll), printed by kir's LLVM worker."""
        from kir._irworker import call
        return call("kir.ir:_text", self.bitcode)


def read_module(bitcode: bytes, index: int = 0, source: str = "", image: int = -1,
                embedded: str = "", for_kernel: str = "") -> IrModule:
    """Read one bitcode module (in kir's LLVM worker: `read_modules`); a failure is
    recorded in `.error`."""
    return read_modules([IrModule(index=index, source=source, image=image, embedded=embedded,
                                  for_kernel=for_kernel, bitcode=bitcode)])[0]


def read_modules(modules: list[IrModule]) -> list[IrModule]:
    """Fill in each module's triple, data layout, functions and globals from its
    bitcode, or its `.error`: read in kir's LLVM worker process (kir/_irworker.py),
    so that a module that crashes LLVM is an error, never the end of kir. Bytes
    already read in this process are not read again."""
    for m, found in zip(modules, _answers([m.bitcode for m in modules])):
        m.error = found.get("error", "")
        if not m.error:
            m.triple, m.data_layout = found["triple"], found["data_layout"]
            m.functions = [IrFunction(**{**f, "params": [IrParam(**p) for p in f["params"]]})
                           for f in found["functions"]]
            m.globals = [IrGlobal(**g) for g in found["globals"]]
    return modules


def parse_bitcode(bitcode: bytes, what: str = "this module"):
    """The llvmlite module of `bitcode`, parsed only once the worker has read the
    same bytes whole (`read_modules`); a module it could not read (or that crashed
    it) raises KirError with the reason, naming it `what`. Called in the worker
    (kir.jit, kir.ir.link_bitcode): kir's own process parses no input IR."""
    import llvmlite.binding as llvm
    found = _answers([bitcode])[0]
    if found.get("error"):
        raise KirError(found["error"].replace("this module", what, 1))
    return llvm.parse_bitcode(bitcode)


def texts(modules: list[IrModule]) -> list[str]:
    """Each module's text (`IrModule.text`), all printed in one request to the worker."""
    from kir._irworker import map_each
    answers, died = map_each("kir.ir:_text", [m.bitcode for m in modules], [None] * len(modules))
    if died:
        raise died
    for status, value in answers:
        if status == "raise":
            raise value
    return [value for _, value in answers]


def _text(bitcode: bytes) -> str:
    return str(parse_bitcode(bitcode))


def link_bitcode(bitcode: list[bytes]) -> bytes:
    """The modules linked into one (bitcode), in kir's LLVM worker: a module it cannot
    read or link raises KirError (or RuntimeError, llvmlite's)."""
    from kir._irworker import call
    return call("kir.ir:_linked", bitcode)


def _linked(bitcode: list[bytes]) -> bytes:
    first, *others = [parse_bitcode(b) for b in bitcode]
    for other in others:
        first.link_in(other)
    return first.as_bitcode()


def _answers(bitcodes: list[bytes]) -> list[dict]:
    """`analyse` of each module: remembered, or read by the worker (kir/_irworker.py)."""
    keys = [_digest(b) for b in bitcodes]
    todo = {k: b for k, b in zip(keys, bitcodes) if k not in _READ}
    known = {k: _READ[k] for k in keys if k in _READ}
    if todo:
        from kir._irworker import map_each
        waiting, rest = list(todo), list(todo.values())
        while rest:  # all in one request; after a module that killed the worker, the rest in another
            answers, died = map_each("kir.ir:analyse", rest, [READ_SECONDS + len(b) / (1 << 20) for b in rest])
            if died:
                answers.append(("ok", {"error": f"{died} reading this module"}))
            known.update((key, answer) for key, (_, answer) in zip(waiting, answers))
            waiting, rest = waiting[len(answers):], rest[len(answers):]
        if len(_READ) + len(todo) > _READ_MAX:
            _READ.clear()
        _READ.update((k, known[k]) for k in todo)
    return [known[k] for k in keys]


#: Seconds a worker may take to read a module, plus one per MiB of it.
READ_SECONDS = 60
#: What the worker answered for each module read in this process, by BLAKE2b of its bytes
#: (a hash no input can collide with a module that was read), at most _READ_MAX.
_READ: dict[bytes, dict] = {}
_READ_MAX = 4096


def _digest(bitcode: bytes) -> bytes:
    return hashlib.blake2b(bitcode, digest_size=32).digest()


def analyse(bitcode: bytes) -> dict:
    """What `read_modules` fills in, as a dict (or {"error": why}): run in kir's
    LLVM worker (kir/_irworker.py). The module is parsed, verified, printed and its
    names read: what kir does with it later has then been done once here. Any
    exception (a name that is not UTF-8, ...) is the module's error."""
    import llvmlite.binding as llvm
    version = ".".join(map(str, llvm.llvm_version_info))
    try:
        parsed = llvm.parse_bitcode(bitcode)
    except Exception as error:  # llvmlite raises RuntimeError with LLVM's message
        return {"error": f"llvmlite (LLVM {version}) cannot read this module: {_one_line(error)}"}
    try:
        parsed.verify()
    except Exception as error:
        return {"error": f"llvmlite (LLVM {version}) read this module, but it is not valid IR: {_one_line(error)}"}
    try:
        module = _analysed(parsed, llvm)
        _omp_regions(module, bitcode, llvm)
    except Exception as error:
        return {"error": f"llvmlite (LLVM {version}) cannot read this module: {_one_line(error)}"}
    return {"triple": module.triple, "data_layout": module.data_layout,
            "functions": [asdict(f) for f in module.functions], "globals": [asdict(g) for g in module.globals]}


def _omp_regions(module: IrModule, bitcode: bytes, llvm) -> None:
    """Each OpenMP region kernel's region identity (IrFunction.omp_region), from the
    module's text printed from a context of its own: the worker's global context renames
    a named type another module it read defined (`%struct.ident_t.1`), so that text
    would depend on what the worker read before."""
    regions = [f for f in module.functions
               if f.is_kernel and not f.is_declaration and f.name.startswith("__omp_offloading_")]
    if regions:
        text = str(llvm.parse_bitcode(bitcode, context=llvm.create_context()))
        entities = _entities(text)
        for f in regions:
            f.omp_region = omp_region_identity(f.name, text, entities) or ""


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split())[:500] or type(error).__name__


def _analysed(parsed, llvm) -> IrModule:
    module = IrModule(index=0, source="", image=-1)
    module.triple = parsed.triple
    module.data_layout = parsed.data_layout
    layout = llvm.create_target_data(parsed.data_layout) if parsed.data_layout else None
    text = str(parsed)
    conventions, jit_marked = _definitions(text)
    annotations = _jit_annotations(text)
    for fn in parsed.functions:
        f = IrFunction(name=fn.name, is_declaration=bool(fn.is_declaration),
                       calling_convention=conventions.get(fn.name, ""))
        f.params = [_param(i, arg, parsed, layout) for i, arg in enumerate(fn.arguments)]
        if fn.name in annotations or fn.name in jit_marked:
            f.jit, f.jit_args = True, annotations.get(fn.name)
        module.functions.append(f)
    for g in parsed.global_variables:
        if g.name.startswith("llvm."):
            continue
        module.globals.append(IrGlobal(g.name, str(g.global_value_type),
                                       _size(layout, g.global_value_type)))
    return module


def _size(layout, typeref) -> int | None:
    try:
        return int(layout.get_abi_size(typeref)) if layout is not None else None
    except Exception:  # opaque or unsized types
        return None


def _param(index: int, arg, parsed, layout) -> IrParam:
    param = IrParam(index=index, type=str(arg.type), store_size=_size(layout, arg.type))
    for attribute in arg.attributes:
        match = _POINTEE.search(attribute.decode(errors="replace"))
        if match:
            param.pointee_kind, param.pointee_type = match[1], match["type"]
            param.pointee_size = pointee_size(match["type"], parsed, layout)
    return param


def pointee_size(type_text: str, parsed, layout) -> int | None:
    """The size in bytes of the type a byval / byref parameter attribute names
    (`%struct.S`, `i32`, `double`, ...) in the llvmlite module `parsed` under the
    target data `layout`; None when it cannot be told (opaque, unsized, no layout)."""
    if type_text.startswith("%"):
        try:
            return _size(layout, parsed.get_struct_type(type_text[1:].strip('"')))
        except Exception:
            return None
    scalar = re.fullmatch(r"i(\d+)|(half|bfloat|float|double)", type_text)
    if scalar:
        bits = int(scalar[1]) if scalar[1] else {"half": 16, "bfloat": 16, "float": 32, "double": 64}[scalar[2]]
        return (bits + 7) // 8
    return None


def _definitions(text: str) -> tuple[dict[str, str], set[str]]:
    """Calling convention of every defined function, and those carrying !proteus.jit."""
    conventions, jit = {}, set()
    for line in text.splitlines():
        match = _DEFINE.match(line)
        if not match:
            continue
        name = match["name"].strip('"')
        conventions[name] = next((cc for cc in KERNEL_CALLING_CONVENTIONS
                                  if cc in match["head"].split()), "")
        if "!proteus.jit" in match["rest"]:
            jit.add(name)
    return conventions, jit


_ANNOTATION = re.compile(
    r"@([\w.$\"]+)\s*(?:to [^,]*\))?,\s*ptr(?: addrspace\(\d+\))? @([\w.$]+),"
    r"\s*ptr(?: addrspace\(\d+\))? @[\w.$]+,\s*i32 \d+,\s*ptr(?: addrspace\(\d+\))? (@[\w.$]+|null)")


def _jit_annotations(text: str) -> dict[str, list[int]]:
    """Functions annotated `__attribute__((annotate("jit", 1, 3)))`: name -> [1, 3].

    clang lists them in @llvm.global.annotations as {function, label string,
    file string, line, argument struct}."""
    table = re.search(r"^@llvm\.global\.annotations = .*$", text, re.M)
    if not table:
        return {}
    strings = dict(re.findall(r'^@([\w.$]+) = .*c"([^"]*)\\00"', text, re.M))
    args = {}
    for name, line in re.findall(r"^@([\w.$]+) = (.*)$", text, re.M):
        groups = re.findall(r"\{ ([^{}]*) \}", line)
        if groups:
            args[name] = [int(v) for v in re.findall(r"i32 (\d+)", groups[-1])]
    found = {}
    for function, label, arg_list in _ANNOTATION.findall(table[0]):
        if strings.get(label) == "jit":
            found[function.strip('"')] = args.get(arg_list.lstrip("@"), [])
    return found


def ir_modules(binary: Binary) -> list[IrModule]:
    """Every IR module of a binary, read (by kir's LLVM worker, `read_modules`):
    bitcode images and IR embedded in device code."""
    modules: list[IrModule] = []
    for image in binary.images:
        if image.kind is ImageKind.bitcode:
            modules.append(IrModule(len(modules), _where(image), image.index, bitcode=image.read()))
        elif image.kind in (ImageKind.cubin, ImageKind.code_object) and not image.obfuscated:
            for embedded in image.code.ir:
                modules.append(IrModule(len(modules), f"{_where(image)}: {embedded.name}", image.index,
                                        embedded.name, embedded.kernel, embedded.bitcode))
    return read_modules(modules)


def _where(image: Image) -> str:
    c = image.container
    target = f" {image.target}" if image.target else ""
    return f"image #{image.index} ({image.kind}{target} in {c.format} {c.section or '(file)'})"


def kernel_ir(binary: Binary, modules: list[IrModule]) -> dict[tuple[int, str], int]:
    """(image index, kernel name) -> index of the IR module that defines the kernel.

    IR embedded in the image itself (Proteus) comes first; then any module of the
    binary that defines the kernel for the same kind of target (NVPTX or AMDGPU)."""
    defining: dict[str, list[IrModule]] = {}
    for m in modules:
        for f in m.kernels:
            if not f.is_declaration:
                defining.setdefault(f.name, []).append(m)
    links = {}
    for image in binary.images:
        if image.kind not in CODE_IMAGES or image.obfuscated:
            continue
        family = "amdgcn" if image.kind is ImageKind.code_object else "nvptx"
        for kernel in image.kernels:
            candidates = [m for m in defining.get(kernel.name, []) if m.triple.startswith(family)]
            own = [m for m in candidates if m.image == image.index]
            if own or candidates:
                links[(image.index, kernel.name)] = (own or candidates)[0].index
    return links


# --- OpenMP target regions (docs/hashing.md, "OpenMP target regions") ---------------------

_GLOBAL_REF = re.compile(r'@("(?:[^"\\]|\\.)*"|[-a-zA-Z$._][-a-zA-Z$._0-9]*|\d+)')
_ATTRIBUTE_REF = re.compile(r"#\d+\b")
_TYPE_REF = re.compile(r'%("(?:[^"\\]|\\.)*"|[-a-zA-Z$._][-a-zA-Z$._0-9]*)')
_REGION_IDS = re.compile(r"__omp_offloading_[0-9a-f]+_[0-9a-f]+_")
_ANON = re.compile(r"\banon\.[0-9a-f]{32}\.")
# An OpenMP source location (ident_t's string, ";file;function;line;column;;"): flang writes
# the source file's absolute path.
_LOCATION = re.compile(r'\[\d+ x i8\] c";([^;"]*);([^;"]*);(\d+);(\d+);;\\00"')


# ident_t's fourth field is that string's length.
_LOCATION_SIZE = re.compile(r"(%struct\.ident_t(?:\.\d+)? \{ i32 -?\d+, i32 -?\d+, i32 -?\d+, i32 )\d+(, ptr )")


def _location(match: re.Match) -> str:
    return f'[_ x i8] c";{match[1].rsplit("/", 1)[-1]};{match[2]};{match[3]};{match[4]};;\\00"'


def _entities(text: str) -> dict[str, str]:
    """The module's top-level entities by the name they are referred to with: "@name"
    (a global, alias or function, its definition or declaration), "#N" (an attribute
    group) and "%name" (a named type) -> their text."""
    out: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        head = line.split(" ", 1)[0]
        if line.startswith("define "):
            end = i
            while end < len(lines) and lines[end] != "}":
                end += 1
            match = _DEFINE.match(line)
            if match:
                out["@" + match["name"]] = "\n".join(lines[i:end + 1])
            i = end + 1
            continue
        if line.startswith("declare "):
            match = re.search(r"@(\"[^\"]+\"|[-a-zA-Z$._0-9]+)\(", line)
            if match:
                out["@" + match[1]] = line
        elif line.startswith("attributes #"):
            out[line.split(" ", 2)[1]] = line
        elif line.startswith(("@", "%")) and " = " in line:
            out[head] = line
        i += 1
    return out


def omp_region_code(kernel: str, text: str, entities: dict[str, str] | None = None) -> str:
    """The canonical code of OpenMP region `kernel` in the module printed as `text`: the
    module's target triple and data layout, then every entity the kernel's definition
    reaches through references to globals and functions (@name), attribute groups (#N)
    and named types (%name), each once, sorted; with every region name's device and file
    ids written as 0, clang's per-module `anon.<md5>.` prefixes as `anon.` and the file of
    OpenMP source-location strings as its base name, their length in `%struct.ident_t`
    as `_` (all differ between builds of the same source in two directories)."""
    entities = _entities(text) if entities is None else entities
    todo, seen = ["@" + kernel], set()
    while todo:
        name = todo.pop()
        if name in seen or name not in entities:
            continue
        seen.add(name)
        body = entities[name]
        todo += ["@" + m for m in _GLOBAL_REF.findall(body)]
        todo += _ATTRIBUTE_REF.findall(body)
        todo += ["%" + m for m in _TYPE_REF.findall(body)]
    header = [line for line in text.splitlines() if line.startswith(("target triple", "target datalayout"))]
    parts = sorted(_canonical(entities[n]) for n in seen)
    return "\n".join(header + parts) + "\n"


def _canonical(entity: str) -> str:
    entity = _ANON.sub("anon.", _REGION_IDS.sub("__omp_offloading_0_0_", entity))
    return _LOCATION_SIZE.sub(r"\1_\2", _LOCATION.sub(_location, entity))


def omp_region_identity(kernel: str, text: str, entities: dict[str, str] | None = None) -> str | None:
    """The region identity of OpenMP region `kernel` defined in the module printed as
    `text` (32 hex digits), from its normalized name and omp_region_code; None when
    `kernel` is not a region's name (kir._core.parse_omp_region_name)."""
    from kir import _core
    region = _core.parse_omp_region_name(kernel)
    if region is None:
        return None
    digest = _core.xxh3_128(omp_region_code(kernel, text, entities).encode())
    return _core.omp_region_identity(region.normalized, "ir", digest).hex


__all__ = ["analyse", "ir_modules", "IrFunction", "IrGlobal", "IrModule", "IrParam", "KERNEL_CALLING_CONVENTIONS",
           "kernel_ir", "link_bitcode", "omp_region_code", "omp_region_identity", "parse_bitcode", "pointee_size", "read_module", "read_modules",
           "texts"]
