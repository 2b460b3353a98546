"""Optimization through llvmlite's new pass manager: an opt level, or a pipeline
in the textual syntax of `opt -passes=` restricted to the passes llvmlite 0.50
exposes (llvmlite has no pipeline parser: each name maps to its `add_*` method).

    default<O0> .. default<O3>   LLVM's per-module default pipeline
    instcombine,simplifycfg,...  single passes, comma-separated
    function(...), cgscc(...), loop(...), module(...)   adaptors: their passes are
                                 run as module passes, in order

Stages run in order: `sroa,default<O2>,globaldce` is three pass managers.
"""
from __future__ import annotations

import re

from kir.errors import OptionError

#: LLVM's pass name -> the llvmlite ModulePassManager method adding it: every
#: optimization or utility pass llvmlite 0.50 binds (`dir(llvmlite.binding.
#: ModulePassManager)`: 61 `add_*`; its FunctionPassManager's 40 are a subset).
#: Left out, as `NOT_OFFERED` says why: the printers and viewers (they write .dot
#: files into the current directory or open a viewer; they change no code).
PASSES = {
    "aa-eval": "add_aa_eval_pass",
    "adce": "add_aggressive_dce_pass",
    "aggressive-instcombine": "add_aggressive_instcombine_pass",
    "always-inline": "add_always_inliner_pass",
    "argpromotion": "add_argument_promotion_pass",
    "break-crit-edges": "add_break_critical_edges_pass",
    "constmerge": "add_constant_merge_pass",
    "dce": "add_dead_code_elimination_pass",
    "deadargelim": "add_dead_arg_elimination_pass",
    "dse": "add_dead_store_elimination_pass",
    "function-attrs": "add_post_order_function_attributes_pass",
    "globaldce": "add_global_dead_code_eliminate_pass",
    "globalopt": "add_global_opt_pass",
    "instcombine": "add_instruction_combine_pass",
    "instnamer": "add_instruction_namer_pass",
    "ipsccp": "add_ipsccp_pass",
    "jump-threading": "add_jump_threading_pass",
    "lcssa": "add_lcssa_pass",
    "loop-deletion": "add_loop_deletion_pass",
    "loop-reduce": "add_loop_strength_reduce_pass",
    "loop-rotate": "add_loop_rotate_pass",
    "loop-simplify": "add_loop_simplify_pass",
    "loop-unroll": "add_loop_unroll_pass",
    "loop-unroll-and-jam": "add_loop_unroll_and_jam_pass",
    "lower-atomic": "add_lower_atomic_pass",
    "lower-switch": "add_lower_switch_pass",
    "lowerinvoke": "add_lower_invoke_pass",
    "memcpyopt": "add_mem_copy_opt_pass",
    "mergefunc": "add_merge_functions_pass",
    "newgvn": "add_new_gvn_pass",
    "partial-inliner": "add_partial_inliner_pass",
    "reassociate": "add_reassociate_pass",
    "reg2mem": "add_register_to_memory_pass",
    "rpo-function-attrs": "add_rpo_function_attrs_pass",
    "sccp": "add_sccp_pass",
    "simplifycfg": "add_simplify_cfg_pass",
    "sink": "add_sinking_pass",
    "sroa": "add_sroa_pass",
    "strip": "add_strip_symbols_pass",
    "strip-dead-debug-info": "add_strip_dead_debug_info_pass",
    "strip-dead-prototypes": "add_strip_dead_prototype_pass",
    "strip-debug-declare": "add_strip_debug_declare_pass",
    "strip-nondebug": "add_strip_non_debug_symbols_pass",
    "tailcallelim": "add_tail_call_elimination_pass",
    "mergereturn": "add_unify_function_exit_nodes_pass",
    "verify": "add_verifier",
    "internalize": "add_internalize_pass",   # LLVM's InternalizePass, no list of symbols to keep
    "loop-extract": "add_loop_extract_pass",
    "refprune": "add_refprune_pass",         # llvmlite's own (Numba's reference-count pruning); no-op elsewhere
}

#: llvmlite's add_* methods kir does not offer, with why (tests/jit check the two lists
#: cover every method).
NOT_OFFERED = {name: "a printer or viewer: writes .dot files or opens a viewer, changes no code" for name in (
    "add_cfg_only_printer_pass", "add_cfg_printer_pass", "add_dom_only_printer_pass", "add_dom_only_viewer_pass",
    "add_dom_printer_pass", "add_dom_viewer_pass", "add_dot_call_graph_printer_pass",
    "add_module_debug_info_pass", "add_post_dom_only_printer_pass", "add_post_dom_only_viewer_pass",
    "add_post_dom_printer_pass", "add_post_dom_viewer_pass")}
_DEFAULT = re.compile(r"default<O([0-3])>")
ADAPTORS = ("function", "cgscc", "loop", "loop-mssa", "module")


def parse(text: str) -> list[tuple[str, object]]:
    """The stages of a pipeline: ("default", level) or ("passes", [names])."""
    if not isinstance(text, str) or not text.strip():
        raise OptionError("--pipeline: empty pipeline")
    names = _flatten(text.replace(" ", ""), text)
    stages: list[tuple[str, object]] = []
    for name in names:
        default = _DEFAULT.fullmatch(name)
        if default:
            stages.append(("default", int(default[1])))
        elif name in PASSES:
            if stages and stages[-1][0] == "passes":
                stages[-1][1].append(name)  # type: ignore[union-attr]
            else:
                stages.append(("passes", [name]))
        else:
            raise OptionError(f"--pipeline {text!r}: unknown pass {name!r}; llvmlite 0.50 offers "
                              f"default<O0..3> and {', '.join(sorted(PASSES))}")
    return stages


def _flatten(text: str, whole: str) -> list[str]:
    out = []
    for piece in _split(text, whole):
        match = re.fullmatch(r"([\w-]+)\((.*)\)", piece)
        if match:
            if match[1] not in ADAPTORS:
                raise OptionError(f"--pipeline {whole!r}: unknown adaptor {match[1]!r}; expected "
                                  f"{', '.join(ADAPTORS)}")
            out.extend(_flatten(match[2], whole))
        elif piece:
            out.append(piece)
        else:
            raise OptionError(f"--pipeline {whole!r}: empty pass name")
    return out


def _split(text: str, whole: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "(<":
            depth += 1
        elif c in ")>":
            depth -= 1
            if depth < 0:
                raise OptionError(f"--pipeline {whole!r}: unbalanced {c!r}")
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise OptionError(f"--pipeline {whole!r}: unbalanced parentheses")
    parts.append(text[start:])
    return parts


def tuning(level: int):
    """The pipeline tuning options clang gives its CUDA device compile at -O`level`
    (clang/lib/CodeGen/BackendUtil.cpp, EmitAssemblyHelper::RunOptimizationPipeline:
    LoopUnrolling and LoopInterleaving = UnrollLoops, LoopVectorization =
    VectorizeLoop, SLPVectorization = VectorizeSLP; the driver turns unrolling and
    both vectorizers on from -O2, `clang -### --cuda-device-only -O3` shows
    -vectorize-loops -vectorize-slp). llvmlite's own default leaves the SLP
    vectorizer off at every level."""
    import llvmlite.binding as llvm
    pto = llvm.PipelineTuningOptions(speed_level=level)
    pto.loop_unrolling = pto.loop_interleaving = level >= 2
    pto.loop_vectorization = pto.slp_vectorization = level >= 2
    return pto


def clang_options() -> None:
    """The LLVM options clang's CUDA driver passes to a device compile (`-mllvm
    -enable-memcpyopt-without-libcalls`: NVPTX has no memcpy library call), set once
    in the process that runs the pipeline (kir's LLVM worker)."""
    global _options_set
    if not _options_set:
        import llvmlite.binding as llvm
        llvm.set_option("kir", "-enable-memcpyopt-without-libcalls")
        _options_set = True


_options_set = False


def run(module, machine, stages: list[tuple[str, object]]) -> None:
    import llvmlite.binding as llvm
    clang_options()
    for kind, value in stages:
        if kind == "default":
            builder = llvm.create_pass_builder(machine, tuning(value))
            builder.getModulePassManager().run(module, builder)
        else:
            builder = llvm.create_pass_builder(machine, llvm.PipelineTuningOptions(speed_level=2))
            manager = llvm.create_new_module_pass_manager()
            for name in value:  # type: ignore[union-attr]
                getattr(manager, PASSES[name])()
            manager.run(module, builder)


def cleanup(module, machine) -> None:
    """After the transform, before any optimization: the always-inliner merges the
    body into its wrapper (the constants take the arguments' places, as Proteus's
    replaceAllUsesWith does, whatever pipeline follows), then what Proteus runs
    after specializing (runCleanupPassPipeline): GlobalDCE, StripDeadPrototypes."""
    run(module, machine, [("passes", ["always-inline", "globaldce", "strip-dead-prototypes"])])


__all__ = ["ADAPTORS", "clang_options", "cleanup", "NOT_OFFERED", "parse", "PASSES", "run", "tuning"]
