"""The IR transform: a kernel specialized for runtime constants, dims and bounds.

llvmlite 0.50's binding reads, renames, relinks and optimizes a module but cannot
replace uses, change a calling convention, remove an attribute or build a call
(its ffi exports no LLVM C API). So the transform is split:

- through llvmlite's API: the kernel is renamed to an internal body function
  (`<kernel>.kir.body`; references follow the rename, as `Value::setName` does),
  and, unless kept, the module's other kernels are made internal;
- on the printed module (.ll), with a few edits that each touch one well-defined
  construct, then parsed and verified again:
  * `noinline` / `optnone` removed from every attribute group (Proteus's
    embedded IR carries them when its translation unit was built at -O0; the JIT
    wants everything optimized), "target-cpu" / "+sm_NN" / "+ptxNN" set to
    the target;
  * the body loses the `ptx_kernel` calling convention and gains `alwaysinline`;
    every defined function but the new kernel (and the other kernels, when kept)
    is internal: nothing outside the module calls it;
  * a `ptx_kernel` wrapper with the kernel's name and signature calls the body
    with each specialized argument replaced by its constant (an object or array:
    a private constant global holding the bytes); inlining folds the constants
    into the body at every opt level (Proteus: TransformArgumentSpecialization
    replaces the argument's uses with the constant);
  * calls to `llvm.nvvm.read.ptx.sreg.ntid.*` / `nctaid.*` become the constant
    block / grid dimension (Proteus: setKernelDims);
  * launch bounds become the wrapper's `"nvvm.maxntid"` / `"nvvm.minctasm"`
    function attributes, which LLVM 22's NVPTX back end turns into `.maxntid` /
    `.minnctapersm` (an `!nvvm.annotations` maxntid entry is ignored by it;
    Proteus's setLaunchBoundsForKernel does the same for LLVM >= 22).
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field

from kir.errors import KirError, OptionError
from kir.jit.values import ArgValue, Specialization

KERNEL_CC = ("ptx_kernel", "amdgpu_kernel")
_IDENT = re.compile(r"[-a-zA-Z$._][-a-zA-Z$._0-9]*")
_ATTR_GROUP = re.compile(r"^(attributes #\d+ = \{ )(.*)( \})$", re.M)
_ATTR_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"(?:="(?:[^"\\]|\\.)*")?|[^\s"]+(?:\([^)]*\))?')
_DIM_CALL = re.compile(
    r"^(?P<indent>\s*)(?P<value>%[-\w.$]+|%\"[^\"]*\") = (?:tail |musttail |notail )?call\b[^@\n]*"
    r"@llvm\.nvvm\.read\.ptx\.sreg\.(?P<which>ntid|nctaid)\.(?P<axis>[xyz])\(\)[^\n]*$", re.M)
BODY_SUFFIX = ".kir.body"


def symbol(name: str) -> str:
    """`name` as an LLVM global identifier: @name, or @"name" when it needs quoting."""
    if _IDENT.fullmatch(name):
        return "@" + name
    return '@"' + "".join(c if c.isprintable() and c not in '"\\' else f"\\{ord(c):02X}"
                          for c in name) + '"'


@dataclass
class Param:
    index: int          #: 0-based
    text: str           #: type and attributes, no name: `ptr noundef byval(%struct.S) align 8`
    type: str           #: LLVM type: `ptr`, `ptr addrspace(1)`, `double`
    byval_type: str = ""  #: the pointee type of a byval/byref parameter
    byval_kind: str = ""  #: "byval" or "byref"
    byval_size: int | None = None
    name: str = ""        #: the parameter's name as printed (`%a`), "" when unnamed


@dataclass
class TransformReport:
    """What the transform did, for people and for tests."""
    body: str = ""
    replaced_args: list[int] = field(default_factory=list)    #: 1-based positions
    replaced_dims: dict[str, int] = field(default_factory=dict)  #: "ntid.x" -> number of reads replaced
    dropped_kernels: list[str] = field(default_factory=list)
    attributes_removed: int = 0


def _split_top(text: str, sep: str = ",") -> list[str]:
    """Split on `sep` outside (), [], {}, <> and quotes."""
    parts, depth, quote, start = [], 0, False, 0
    for i, c in enumerate(text):
        if quote:
            if c == '"':
                quote = False
            continue
        if c == '"':
            quote = True
        elif c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth -= 1
        elif c == sep and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    if tail:
        parts.append(tail)
    return parts


def _close_paren(text: str, open_index: int) -> int:
    depth, quote = 0, False
    for i in range(open_index, len(text)):
        c = text[i]
        if quote:
            quote = c != '"'
            continue
        if c == '"':
            quote = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
    raise KirError("unbalanced parentheses in a function header")


def _define_line(text: str, name: str) -> tuple[int, int]:
    """Start and end offsets of the `define ... @name(...` line."""
    needle = symbol(name) + "("
    for match in re.finditer(r"^define [^\n]*$", text, re.M):
        line = match[0]
        at = line.find(needle)
        if at > 0 and line[at - 1] == " ":
            return match.start(), match.end()
    raise KirError(f"no definition of {name} in the module text")


def _header_parts(line: str, name: str) -> tuple[str, str, str]:
    """(head before @name, parameter list text, rest after the closing paren)."""
    at = line.index(symbol(name) + "(")
    open_index = at + len(symbol(name))
    close = _close_paren(line, open_index)
    return line[:at], line[open_index + 1:close], line[close + 1:]


def _param_type(text: str) -> str:
    match = re.match(r"(ptr(?: addrspace\(\d+\))?|<[^>]*>|\[[^\]]*\]|\{[^}]*\}|%[-\w.$\"]+|\S+)", text)
    return match[1] if match else text


def parse_params(param_text: str) -> list[Param]:
    params = []
    for i, piece in enumerate(_split_top(param_text)):
        if piece == "...":
            raise KirError("a variadic kernel cannot be specialized")
        named = re.search(r'\s+(%(?:[-\w.$]+|"[^"]*"))$', piece)
        body = piece[:named.start()] if named else piece
        name = named[1] if named and not re.fullmatch(r"%\d+", named[1]) else ""
        param = Param(index=i, text=body, type=_param_type(body), name=name)
        byval = re.search(r"\b(byval|byref)\(", body)
        if byval:
            close = _close_paren(body, byval.end() - 1)
            param.byval_type, param.byval_kind = body[byval.end():close], byval[1]
        params.append(param)
    return params


def _tokens(attributes: str) -> list[str]:
    return _ATTR_TOKEN.findall(attributes)


def _key(token: str) -> str:
    return token.split("=", 1)[0].strip('"') if token.startswith('"') else token


def _float_bits(kind: str, value: bytes) -> str:
    if kind == "double":
        return f"0x{struct.unpack('<Q', value)[0]:016X}"
    if kind == "float":  # LLVM writes a float as the double of the same value
        double = struct.unpack("<d", struct.pack("<d", struct.unpack("<f", value)[0]))[0]
        return f"0x{struct.unpack('<Q', struct.pack('<d', double))[0]:016X}"
    if kind == "half":
        return f"0xH{struct.unpack('<H', value)[0]:04X}"
    return f"0xR{struct.unpack('<H', value)[0]:04X}"  # bfloat


_INT_TYPES = {"i1": 1, "i8": 1, "i16": 2, "i32": 4, "i64": 8}
_FLOAT_TYPES = {"half": 2, "bfloat": 2, "float": 4, "double": 8}
#: which kir types fit which LLVM scalar types
_COMPATIBLE = {
    "i1": {"bool"}, "i8": {"i8", "u8", "bool"}, "i16": {"i16", "u16"}, "i32": {"i32", "u32"},
    "i64": {"i64", "u64", "ptr"}, "half": {"f16"}, "bfloat": {"bf16"}, "float": {"f32"},
    "double": {"f64"},
}


def describe(param: Param) -> str:
    size = _INT_TYPES.get(param.type) or _FLOAT_TYPES.get(param.type)
    if param.byval_type:
        return f"{param.type} byval({param.byval_type})" + \
            (f" ({param.byval_size} bytes)" if param.byval_size is not None else "")
    if param.type.startswith("ptr"):
        return f"{param.type} (8 bytes)"
    return f"{param.type} ({size} byte{'s' if size != 1 else ''})" if size else param.type


def constant_for(kernel: str, param: Param, arg: ArgValue, globals_out: list[str]) -> str:
    """The LLVM constant operand (`type value`) that replaces `param`; may add a
    private global to `globals_out`. OptionError when the value does not fit."""
    where = f"argument {arg.position} of {kernel} is {describe(param)}"
    t = param.type
    if arg.type == "bytes":
        if param.byval_type:
            if param.byval_size is not None and len(arg.value) != param.byval_size:
                raise OptionError(f"{where}: the object value has {len(arg.value)} bytes, it needs "
                                  f"{param.byval_size}")
            return f"{t} {param.byval_kind}({param.byval_type}) {_global(kernel, arg, t, globals_out)}"
        if t.startswith("ptr"):  # an array read through the pointer
            return f"{t} {_global(kernel, arg, t, globals_out)}"
        vector = re.fullmatch(r"<(\d+) x (\w+)>", t)
        if vector:  # a vector's elements (Proteus VECTOR, kir_jit_key's KIR_JIT_VECTOR)
            count, element = int(vector[1]), vector[2]
            size = _INT_TYPES.get(element) or _FLOAT_TYPES.get(element)
            if size is None or element == "i1":
                raise OptionError(f"{where}: only vectors of integers and floating-point numbers can be specialized")
            if len(arg.value) != count * size:
                raise OptionError(f"{where}: the bytes value has {len(arg.value)} bytes, it needs {count * size}")
            items = ", ".join(f"{element} {_scalar(element, arg.value[i * size:(i + 1) * size])}"
                              for i in range(count))
            return f"{t} <{items}>"
        size = _INT_TYPES.get(t) or _FLOAT_TYPES.get(t)
        if size is None:
            raise OptionError(f"{where}: only scalars, pointers and by-value objects can be specialized")
        if t == "i1":
            size = 1
        if len(arg.value) != size:
            raise OptionError(f"{where}: the bytes value has {len(arg.value)} bytes, it needs {size}")
        return f"{t} {_scalar(t, arg.value)}"
    if param.byval_type:
        raise OptionError(f"{where}: give the object's bytes (TYPE bytes), not a {arg.type}")
    if t.startswith("ptr"):
        if arg.type not in ("ptr", "u64", "i64"):
            raise OptionError(f"{where}: give a ptr (an address) or bytes (an array), not a {arg.type}")
        address = struct.unpack("<Q", arg.value)[0]
        return f"{t} null" if address == 0 else f"{t} inttoptr (i64 {address} to {t})"
    compatible = _COMPATIBLE.get(t)
    if compatible is None:
        raise OptionError(f"{where}: only scalars, pointers and by-value objects can be specialized")
    if arg.type not in compatible:
        raise OptionError(f"{where}, not {arg.type} ({len(arg.value)} byte"
                          f"{'s' if len(arg.value) != 1 else ''}); give one of "
                          f"{', '.join(sorted(compatible))}")
    return f"{t} {_scalar(t, arg.value)}"


def _scalar(t: str, value: bytes) -> str:
    if t in _FLOAT_TYPES:
        return _float_bits(t, value)
    if t == "i1":
        if value not in (b"\0", b"\1"):
            raise OptionError(f"a bool (i1) value is 0 or 1, not 0x{value.hex()}")
        return "true" if value == b"\1" else "false"
    return str(int.from_bytes(value, "little", signed=True))


def _global(kernel: str, arg: ArgValue, ptr_type: str, globals_out: list[str]) -> str:
    name = symbol(f"{kernel}.kir.arg{arg.position}")
    data = "".join(chr(b) if 32 <= b < 127 and chr(b) not in '"\\' else f"\\{b:02X}" for b in arg.value)
    globals_out.append(f"{name} = private unnamed_addr addrspace(1) constant [{len(arg.value)} x i8] "
                       f'c"{data}", align 16')
    if ptr_type == "ptr addrspace(1)":
        return name
    return f"addrspacecast (ptr addrspace(1) {name} to {ptr_type})"


def _edit_tokens(tokens: list[str], arch: str, ptx: int | None, report: TransformReport) -> list[str]:
    """Function attributes without noinline / optnone, for `arch` and PTX `ptx`:
    "target-cpu" the target's processor, "target-features" edited for it
    (_nvptx_features, _amdgpu_features)."""
    if arch.startswith("gfx"):
        cpu, features_for = _amdgpu_features(tokens, arch)
    else:
        cpu, features_for = arch, lambda features: _nvptx_features(features, arch, ptx)
    kept = []
    for token in tokens:
        if token in ("noinline", "optnone"):
            report.attributes_removed += 1
            continue
        if token.startswith('"target-cpu"='):
            token = f'"target-cpu"="{cpu}"'
        elif token.startswith('"target-features"='):
            features = [f for f in token.split("=", 1)[1].strip('"').split(",") if f]
            token = f'"target-features"="{",".join(features_for(features))}"'
        kept.append(token)
    return kept


def _nvptx_features(features: list[str], arch: str, ptx: int | None) -> list[str]:
    """The IR's features with its sm_NN as `arch` and its PTX version as `ptx`."""
    features = [f"+{arch}" if re.fullmatch(r"[+-]sm_\d+[af]?", f) else f for f in features]
    if ptx is not None:
        features = [f"+ptx{ptx}" if re.fullmatch(r"[+-]ptx\d+", f) else f for f in features]
    return features


#: AMDGPU features that are modes, not instruction sets: kept when the kernel moves
#: to another processor (the processor implies its instruction-set features)
_AMDGPU_MODES = ("wavefrontsize32", "wavefrontsize64", "cumode", "tgsplit")


def _amdgpu_features(tokens: list[str], arch: str):
    """For an AMDGPU target-id: its processor, and how the IR's "target-features" become
    the target's: xnack / sramecc as the target-id says (a feature the target-id leaves
    out is dropped: "any", as clang's driver leaves it), or, when the IR was built for
    another processor, only its mode features (wavefront size, CU mode) and the
    target-id's: clang's target features for a processor are those LLVM's processor
    definition implies (amdgpu::getAMDGPUTargetFeatures)."""
    from kir.jit.amdgpu import parse_target_id
    cpu, own = parse_target_id(arch)
    was = next((t.split("=", 1)[1].strip('"') for t in tokens if t.startswith('"target-cpu"=')), cpu)

    def features_for(features: list[str]) -> list[str]:
        features = [f for f in features if f[1:] not in ("xnack", "sramecc")]
        if was != cpu:
            features = [f for f in features if f[1:] in _AMDGPU_MODES]
        return features + own
    return cpu, features_for


def _fn_attributes(fn) -> list[str]:
    return _tokens(" ".join(a.decode(errors="replace") for a in fn.attributes))


def _drop_cc(line: str, name: str) -> str:
    head, params, rest = _header_parts(line, name)
    head = " ".join(w for w in head.split(" ") if w not in KERNEL_CC) + " "
    return head + symbol(name) + "(" + params + ")" + rest


def _add_fn_attributes(line: str, name: str, attributes: str) -> str:
    """Insert function attributes after the parameter list (and unnamed_addr /
    addrspace, which the grammar puts before them)."""
    head, params, rest = _header_parts(line, name)
    prefix = re.match(r"(?:\s+(?:local_)?unnamed_addr)?(?:\s+addrspace\(\d+\))?", rest)
    cut = prefix.end() if prefix else 0
    return head + symbol(name) + "(" + params + ")" + rest[:cut] + " " + attributes + rest[cut:]


def specialize(module, kernel: str, spec: Specialization, arch: str, ptx: int | None = None,
               keep_other_kernels: bool = False):
    """Return (a new llvmlite module, TransformReport). `module` is an llvmlite
    module; it is cloned, not changed. The steps, each its own function (and test):
    read the kernel and its parameters, check the specialization against them, make
    the kernel an inlined body (llvmlite's API), retarget the attribute groups, build
    the wrapper, replace the dims, and parse and verify the result."""
    mod = module.clone()
    report = TransformReport()
    kernels = kernel_names(str(mod))
    fn = find_kernel(mod, kernel, kernels)
    params = kernel_params(mod, fn)
    check_specialization(kernel, params, spec, kernels, keep_other_kernels)
    attributes = wrapper_attributes(fn, spec, arch, ptx)
    others = [k for k in kernels if k != kernel]
    report.body = make_body(mod, fn, others if keep_other_kernels else [])
    if not keep_other_kernels:
        report.dropped_kernels = others
    text = retarget_attribute_groups(str(mod), arch, ptx, report)
    cc = kernel_cc(text, report.body)
    text = inline_body(text, report.body)
    if not keep_other_kernels:
        text = demote_kernels(text, others)
    wrapper, constants, report.replaced_args = build_wrapper(kernel, report.body, params, spec.args, attributes,
                                                             cc)
    text = replace_dims(text, spec, report)
    return parse_verified(add_definitions(text, constants, wrapper), kernel), report


def kernel_cc(text: str, name: str) -> str:
    """The kernel calling convention of the function `name` in the printed module."""
    start, end = _define_line(text, name)
    head = _header_parts(text[start:end], name)[0].split()
    return next((cc for cc in KERNEL_CC if cc in head), KERNEL_CC[0])


def kernel_names(text: str) -> list[str]:
    """The kernels (functions defined with a `ptx_kernel` calling convention, which
    llvmlite's API does not show) of a printed module, in order."""
    names = []
    for match in re.finditer(r"^define ([^@\n]*)@(\"(?:[^\"\\]|\\.)*\"|[-\w.$]+)\(", text, re.M):
        if any(cc in match[1].split() for cc in KERNEL_CC):
            raw = match[2]
            if raw.startswith('"'):
                raw = re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m[1], 16)), raw[1:-1])
            names.append(raw)
    return names


def find_kernel(module, kernel: str, kernels: list[str]):
    """The llvmlite function of `kernel`; OptionError when the module does not define
    it or it is not one of `kernels`."""
    try:
        fn = module.get_function(kernel)
    except NameError:
        fn = None
    if fn is None or fn.is_declaration:
        known = ", ".join(kernels) or "none"
        raise OptionError(f"the module defines no kernel {kernel!r} (its kernels: {known})")
    if kernel not in kernels:
        raise OptionError(f"{kernel} is a device function, not a kernel (the module's kernels: "
                          f"{', '.join(kernels) or 'none'})")
    return fn


def kernel_params(module, fn) -> list[Param]:
    """The parameters of the kernel `fn` (an llvmlite function of `module`) as its
    definition prints them, with the size of each by-value object
    (kir.ir.pointee_size, under the module's data layout)."""
    import llvmlite.binding as llvm

    from kir.ir import pointee_size
    text = str(fn)
    start, end = _define_line(text, fn.name)
    params = parse_params(_header_parts(text[start:end], fn.name)[1])
    layout = llvm.create_target_data(module.data_layout) if module.data_layout else None
    for param in params:
        if param.byval_type and layout is not None:
            param.byval_size = pointee_size(param.byval_type, module, layout)
    return params


def check_specialization(kernel: str, params: list[Param], spec: Specialization, kernels: list[str],
                         keep_other_kernels: bool) -> None:
    """OptionError when `spec` cannot apply: dims with other kernels kept, or an
    argument past the kernel's last parameter. (Each value is checked against its
    parameter's type by `constant_for`.)"""
    if keep_other_kernels and (spec.grid or spec.block) and len(kernels) > 1:
        raise OptionError("grid/block dimensions are specialized in the whole module (as Proteus's "
                          "setKernelDims does): they cannot be with other kernels kept")
    for arg in spec.args:
        if arg.position > len(params):
            raise OptionError(f"argument {arg.position}: {kernel} has {len(params)} parameter"
                              f"{'s' if len(params) != 1 else ''}")


def wrapper_attributes(fn, spec: Specialization, arch: str, ptx: int | None) -> list[str]:
    """The wrapper kernel's function attributes: the kernel's (llvmlite's API),
    retargeted as the attribute groups are, without alwaysinline, with the launch
    bounds as "nvvm.maxntid" / "nvvm.minctasm"."""
    tokens = [t for t in _edit_tokens(_fn_attributes(fn), arch, ptx, TransformReport()) if t != "alwaysinline"]
    if spec.bounds and arch.startswith("gfx"):
        # Proteus's HIP back end (src/include/proteus/impl/CoreLLVMHIP.h,
        # setLaunchBoundsForKernel): "amdgpu-flat-work-group-size" 1,min(1024, max
        # threads); with a minimum of blocks M, "amdgpu-waves-per-eu" M,M
        tokens = [t for t in tokens if _key(t) not in ("amdgpu-flat-work-group-size", "amdgpu-waves-per-eu")]
        tokens.append(f'"amdgpu-flat-work-group-size"="1,{min(1024, spec.bounds[0])}"')
        if spec.bounds[1]:
            tokens.append(f'"amdgpu-waves-per-eu"="{spec.bounds[1]},{spec.bounds[1]}"')
    elif spec.bounds:
        tokens = [t for t in tokens if _key(t) not in ("nvvm.maxntid", "nvvm.minctasm")]
        tokens.append(f'"nvvm.maxntid"="{spec.bounds[0]}"')
        if spec.bounds[1]:
            tokens.append(f'"nvvm.minctasm"="{spec.bounds[1]}"')
    return tokens


def make_body(module, fn, kept_kernels: list[str]) -> str:
    """With llvmlite's API: the kernel renamed to its internal body (`<kernel>.kir.body`:
    references follow the rename) and every other defined function but `kept_kernels`
    internal (nothing outside the module calls them: inlined ones go, the rest get
    the internal ABI). Returns the body's name."""
    import llvmlite.binding as llvm
    body = fn.name + BODY_SUFFIX
    fn.name = body
    fn.linkage = llvm.Linkage.internal
    for f in module.functions:
        if not f.is_declaration and f.name != body and f.name not in kept_kernels:
            f.linkage = llvm.Linkage.internal
    return body


def retarget_attribute_groups(text: str, arch: str, ptx: int | None, report: TransformReport) -> str:
    """Every attribute group without noinline / optnone (counted in the report), its
    "target-cpu" `arch` and its "+sm_NN" / "+ptxNN" features `arch` and `ptx`."""
    return _ATTR_GROUP.sub(lambda m: m[1] + " ".join(_edit_tokens(_tokens(m[2]), arch, ptx, report)) + m[3],
                           text)


def inline_body(text: str, body: str) -> str:
    """The body's definition without the kernel calling convention, with alwaysinline."""
    start, end = _define_line(text, body)
    return text[:start] + _add_fn_attributes(_drop_cc(text[start:end], body), body, "alwaysinline") + text[end:]


def demote_kernels(text: str, names: list[str]) -> str:
    """The kernels `names` as device functions (no kernel calling convention)."""
    for name in names:
        start, end = _define_line(text, name)
        text = text[:start] + _drop_cc(text[start:end], name) + text[end:]
    return text


def build_wrapper(kernel: str, body: str, params: list[Param], args: list[ArgValue],
                  attributes: list[str], cc: str = "ptx_kernel") -> tuple[str, list[str], list[int]]:
    """The kernel wrapper (calling convention `cc`) named `kernel`, of the kernel's signature, calling
    `body` with each specialized argument replaced by its constant: (its definition,
    the private constant globals those need, the replaced positions)."""
    constants: list[str] = []
    replaced: list[int] = []
    given = {a.position: a for a in args}
    wrapper_params, call_args = [], []
    local = _amdgpu_param_names(params) if cc == "amdgpu_kernel" else [f"%arg{p.index}" for p in params]
    for param in params:
        wrapper_params.append(f"{param.text} {local[param.index]}")
        arg = given.get(param.index + 1)
        if arg is None:
            byval = f" {param.byval_kind}({param.byval_type})" if param.byval_type else ""
            call_args.append(f"{param.type}{byval} {local[param.index]}")
        else:
            call_args.append(constant_for(kernel, param, arg, constants))
            replaced.append(arg.position)
    wrapper = (f"define {cc} void {symbol(kernel)}({', '.join(wrapper_params)}) "
               f"{' '.join(attributes)} {{\nentry:\n"
               f"  call void {symbol(body)}({', '.join(call_args)})\n  ret void\n}}\n")
    return wrapper, constants, replaced


def _amdgpu_param_names(params: list[Param]) -> list[str]:
    """The wrapper's parameter names on AMDGPU: the kernel's own (its code-object
    metadata names each argument after its IR value, `.name`), unnamed ones
    numbered as LLVM numbers them."""
    names, number = [], 0
    for param in params:
        if param.name:
            names.append(param.name)
        else:
            names.append(f"%{number}")
            number += 1
    return names


def add_definitions(text: str, constants: list[str], wrapper: str) -> str:
    """The constant globals before the module's first function, the wrapper after its
    last (the parser takes any order)."""
    first = re.search(r"^(define|declare) ", text, re.M)
    cut = first.start() if first else len(text)
    text = text[:cut] + "".join(g + "\n" for g in constants) + ("\n" if constants else "") + text[cut:]
    last = text.rfind("\n}\n")
    return text[:last + 3] + "\n" + wrapper + text[last + 3:]


def parse_verified(text: str, kernel: str):
    """The llvmlite module of the edited text, verified; KirError (a bug in a step)
    when it does not parse or verify."""
    import llvmlite.binding as llvm
    try:
        out = llvm.parse_assembly(text)
        out.verify()
    except RuntimeError as error:
        raise KirError(f"the specialized module of {kernel} does not verify (a bug in kir's "
                       f"transform, please report it): {str(error).strip()}") from None
    return out


#: How HIP code reads the grid and block dimensions on AMDGPU, the names Proteus's
#: setKernelDims replaces (src/include/proteus/impl/CoreLLVMHIP.h, gridDimXFnName
#: .. blockDimZFnName: HIP's __HIP_Coordinates conversion operators, the
#: __hip_get_{grid,block}_dim_* helpers of the HIP headers, and
#: llvm.amdgcn.{num.workgroups,workgroup.size}.*), and, what ROCm 5.x-7.x's
#: headers leave in optimized IR, the device library's __ockl_get_local_size(N) /
#: __ockl_get_num_groups(N) (HIP's amd_hip_runtime.h, __hip_get_block_dim_x ..)
_AMD_DIM_NAMES = {
    **{f"_ZNK17__HIP_CoordinatesI13__HIP_GridDimE3__{a.upper()}cvjEv": ("nctaid", a) for a in "xyz"},
    **{f"llvm.amdgcn.num.workgroups.{a}": ("nctaid", a) for a in "xyz"},
    **{f"_ZL20__hip_get_grid_dim_{a}v": ("nctaid", a) for a in "xyz"},
    **{f"_ZNK17__HIP_CoordinatesI14__HIP_BlockDimE3__{a.upper()}cvjEv": ("ntid", a) for a in "xyz"},
    **{f"llvm.amdgcn.workgroup.size.{a}": ("ntid", a) for a in "xyz"},
    **{f"_ZL21__hip_get_block_dim_{a}v": ("ntid", a) for a in "xyz"},
}
_AMD_DIM_CALL = re.compile(
    r"^(?P<indent>\s*)(?P<value>%[-\w.$]+|%\"[^\"]*\") = (?:tail |musttail |notail )?call\b[^@\n]*?"
    r"\b(?P<ret>i\d+) @(?P<fn>__ockl_get_local_size|__ockl_get_num_groups|"
    + "|".join(re.escape(n) for n in _AMD_DIM_NAMES) + r")\((?P<args>[^\n]*?)\)(?: #\d+)?(?:, ![^\n]*)?$", re.M)


def _replace_amd_dim(match: re.Match, values: dict, report: TransformReport) -> str:
    fn = match["fn"]
    if fn.startswith("__ockl_"):
        axis = re.fullmatch(r"i32(?: noundef)?(?: signext| zeroext)? ([012])", match["args"].strip())
        if not axis:
            return match[0]  # a dimension only known at run time
        key = ("ntid" if fn == "__ockl_get_local_size" else "nctaid", "xyz"[int(axis[1])])
    else:
        key = _AMD_DIM_NAMES[fn]
    if key not in values:
        return match[0]
    name = f"{key[0]}.{key[1]}"
    report.replaced_dims[name] = report.replaced_dims.get(name, 0) + 1
    return f"{match['indent']}{match['value']} = add {match['ret']} {values[key]}, 0"


def replace_dims(text: str, spec: Specialization, report: TransformReport) -> str:
    """Each call reading a specialized dim (`llvm.nvvm.read.ptx.sreg.ntid.*` for the
    block, `nctaid.*` for the grid) replaced by its constant, counted in the report
    (Proteus's setKernelDims: the call's uses take the constant and the call goes)."""
    values = {}
    if spec.block:
        values.update({("ntid", axis): v for axis, v in zip("xyz", spec.block)})
    if spec.grid:
        values.update({("nctaid", axis): v for axis, v in zip("xyz", spec.grid)})
    if not values:
        return text
    text = _AMD_DIM_CALL.sub(lambda m: _replace_amd_dim(m, values, report), text)

    def replace(match: re.Match) -> str:
        key = (match["which"], match["axis"])
        if key not in values:
            return match[0]
        name = f"{key[0]}.{key[1]}"
        report.replaced_dims[name] = report.replaced_dims.get(name, 0) + 1
        return f"{match['indent']}{match['value']} = add i32 {values[key]}, 0"
    return _DIM_CALL.sub(replace, text)


__all__ = ["add_definitions", "BODY_SUFFIX", "build_wrapper", "check_specialization", "constant_for",
           "demote_kernels", "describe", "find_kernel", "inline_body", "KERNEL_CC", "kernel_cc", "kernel_names", "kernel_params",
           "make_body", "Param", "parse_params", "parse_verified", "replace_dims", "retarget_attribute_groups",
           "specialize", "symbol", "TransformReport", "wrapper_attributes"]


# --- floating-point contraction (Options.fp_contract) -----------------------------

FP_CONTRACT = ("auto", "fast", "on", "off")
_FP_OPS = r"fadd|fsub|fmul|fdiv|frem|fneg|call|select|phi|fptrunc|fpext|uitofp|sitofp"
_FLAGS = re.compile(rf"\b({_FP_OPS})((?: (?:nnan|ninf|nsz|arcp|contract|afn|reassoc|fast))+)(?= )")
_FMULADD = re.compile(r"^(\s*)(%[-\w.$]+) = (?:(?:tail|notail|musttail) )?call ((?:[a-z]+ )*)(<\d+ x \w+>|\w+) "
                      r"@llvm\.fmuladd\.[\w.]+\(\4 ([^,]+), \4 ([^,]+), \4 ([^,)]+)\)", re.M)


def fp_contract_of(text: str) -> str:
    """What the front end's -ffp-contract was, as the IR tells it: `contract` (or
    `fast`) on a floating-point operation: fast (CUDA's default, clang marks every
    operation); llvm.fmuladd without them: on (C's default); plain operations only:
    off. A module with neither says nothing: fast, CUDA's default."""
    if any("contract" in m[2] or "fast" in m[2] for m in _FLAGS.finditer(text)):
        return "fast"
    if re.search(r"= (?:[a-z]+ )*call [^\n]*@llvm\.fmuladd\.", text):
        return "on"
    if re.search(r"= (?:fadd|fmul|fsub) ", text):
        return "off"
    return "fast"


def strip_contraction(text: str) -> tuple[str, int]:
    """The module text with no contraction allowed (fp_contract off, as clang
    -ffp-contract=off writes it): `contract` dropped from every operation (`fast`
    spelled out without it) and each llvm.fmuladd split into fmul and fadd, which
    the back end then never fuses. Returns the text and how many places changed."""
    count = 0

    def flags(m: re.Match) -> str:
        nonlocal count
        words = m[2].split()
        if "contract" not in words and "fast" not in words:
            return m[0]
        count += 1
        kept = []
        for w in words:
            if w == "fast":
                kept += [f for f in ("reassoc", "nnan", "ninf", "nsz", "arcp", "afn") if f not in words]
            elif w != "contract":
                kept.append(w)
        return m[1] + "".join(" " + w for w in kept)

    def split(m: re.Match) -> str:
        nonlocal count
        count += 1
        indent, name, fmf, ty, a, b, c = m.groups()
        fmf = " ".join(w for w in fmf.split() if w in ("nnan", "ninf", "nsz", "arcp", "afn", "reassoc"))
        fmf = fmf + " " if fmf else ""
        product = f"%kir.mul.{name[1:]}"
        return f"{indent}{product} = fmul {fmf}{ty} {a}, {b}\n{indent}{name} = fadd {fmf}{ty} {product}, {c}"

    text = _FLAGS.sub(flags, text)
    text = _FMULADD.sub(split, text)
    return text, count
