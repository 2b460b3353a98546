// The LLVM half of the Proteus-style client (specialize.hpp). Each step names the Proteus
// function whose job it does (Proteus e587017, src/include/proteus/impl/); the code is
// this client's own, on LLVM 22's public API.
#include "specialize.hpp"

#include <llvm/ADT/APFloat.h>
#include <llvm/ADT/APInt.h>
#include <llvm/ADT/StringRef.h>
#include <llvm/Analysis/TargetLibraryInfo.h>
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/GlobalVariable.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/ReplaceConstant.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Linker/Linker.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>
#include <llvm/TargetParser/Triple.h>
#include <llvm/Transforms/IPO/GlobalDCE.h>
#include <llvm/Transforms/IPO/Internalize.h>
#include <llvm/Transforms/Utils/ModuleUtils.h>

#include <algorithm>
#include <cstring>
#include <mutex>

// Only the NVPTX target is linked (llvm-config --link-static nvptxcodegen ...).
extern "C" void LLVMInitializeNVPTXTargetInfo();
extern "C" void LLVMInitializeNVPTXTarget();
extern "C" void LLVMInitializeNVPTXTargetMC();
extern "C" void LLVMInitializeNVPTXAsmPrinter();

namespace proteus_client {
namespace {

using namespace llvm;

// kir_arg_type (kir/kir.h): the values this file reads.
enum : uint8_t { I8 = 1, I16, I32, I64, U8, U16, U32, U64, F16, BF16, F32, F64, PTR, BYTES, BOOL };
enum : uint8_t { SCALAR = 0, ARRAY = 1, OBJECT = 2, VECTOR = 3 };  // kir_jit_arg_kind

uint64_t little_endian(const std::vector<unsigned char>& bytes, size_t size) {
  uint64_t v = 0;
  std::memcpy(&v, bytes.data(), std::min({bytes.size(), size, sizeof v}));
  return v;
}

Type* element_type(LLVMContext& ctx, uint8_t type) {
  switch (type) {
    case I8:
    case U8:
    case BOOL: return Type::getInt8Ty(ctx);
    case I16:
    case U16: return Type::getInt16Ty(ctx);
    case I32:
    case U32: return Type::getInt32Ty(ctx);
    case I64:
    case U64:
    case PTR: return Type::getInt64Ty(ctx);
    case F16: return Type::getHalfTy(ctx);
    case BF16: return Type::getBFloatTy(ctx);
    case F32: return Type::getFloatTy(ctx);
    case F64: return Type::getDoubleTy(ctx);
    default: return nullptr;
  }
}

/// A private constant global holding `bytes`, as a pointer of `type` (Proteus
/// TransformArgumentSpecialization::transform, ARRAY and OBJECT: the argument points at it).
Constant* constant_memory(Module& m, Type* type, const std::vector<unsigned char>& bytes) {
  Constant* data = ConstantDataArray::getRaw(StringRef(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
                                             bytes.size(), Type::getInt8Ty(m.getContext()));
  auto* gv = new GlobalVariable(m, data->getType(), true, GlobalValue::PrivateLinkage, data, "proteus.rc");
  gv->setAlignment(Align(16));
  return ConstantExpr::getPointerBitCastOrAddrSpaceCast(gv, type);
}

/// The constant that replaces argument `arg` (Proteus TransformArgumentSpecialization::transform,
/// one case per RuntimeConstantType); nullptr and `why` when the value does not fit the argument.
Constant* constant_for(Module& m, Argument& arg, const RuntimeConstant& rc, std::string& why) {
  LLVMContext& ctx = m.getContext();
  Type* type = arg.getType();
  if (rc.kind == SCALAR) {
    if (rc.type == PTR) {
      if (!type->isPointerTy()) return why = "a PTR value for a non-pointer argument", nullptr;
      return ConstantExpr::getIntToPtr(ConstantInt::get(Type::getInt64Ty(ctx), little_endian(rc.bytes, 8)), type);
    }
    if (type->isIntegerTy()) {
      unsigned bits = type->getIntegerBitWidth();
      uint64_t v = little_endian(rc.bytes, (bits + 7) / 8);
      if (rc.type == BOOL) v = v != 0;
      if (bits < 64) v &= (uint64_t(1) << bits) - 1;
      return ConstantInt::get(ctx, APInt(bits, v));
    }
    if (type->isFloatingPointTy() && rc.type != BYTES) {
      unsigned bits = type->getPrimitiveSizeInBits();
      if (rc.bytes.size() * 8 < bits) return why = "a value smaller than the argument", nullptr;
      return ConstantFP::get(ctx, APFloat(type->getFltSemantics(), APInt(bits, little_endian(rc.bytes, bits / 8))));
    }
    return why = "a scalar of a type the argument does not have", nullptr;
  }
  if ((rc.kind == ARRAY && rc.by_value) || rc.kind == VECTOR) {  // STATIC_ARRAY ([N x T]), VECTOR (<N x T>)
    Type* elt = element_type(ctx, rc.type);
    if (!elt) return why = "an array of an unknown element type", nullptr;
    uint64_t count = rc.bytes.size() / std::max<uint64_t>(1, elt->getPrimitiveSizeInBits() / 8);
    StringRef raw(reinterpret_cast<const char*>(rc.bytes.data()), rc.bytes.size());
    if (type->isArrayTy()) return ConstantDataArray::getRaw(raw, count, elt);
    if (type->isVectorTy()) return ConstantDataVector::getRaw(raw, count, elt);
    return why = "a by-value array for an argument that is not an array or vector", nullptr;
  }
  if (!type->isPointerTy()) return why = "an array or object behind a non-pointer argument", nullptr;
  return constant_memory(m, type, rc.bytes);  // ARRAY behind a pointer, OBJECT (by pointer, or byval)
}

/// Calls of `name` replaced by `value` (Proteus setKernelDims, CoreLLVMDevice.h).
void replace_calls(Module& m, const char* name, uint32_t value) {
  Function* f = m.getFunction(name);
  if (!f) return;
  for (User* u : make_early_inc_range(f->users()))
    if (auto* call = dyn_cast<CallInst>(u)) {
      call->replaceAllUsesWith(ConstantInt::get(call->getType(), value));
      call->eraseFromParent();
    }
}

/// Every use of device global `gv` becomes a load of the pointer `NAME$ptr`, a global the
/// client writes once the module is loaded (Proteus replaceGlobalVariablesWithPointers,
/// CoreLLVMDevice.h, and getKernelFunctionFromImage's relink-by-copy, CoreDeviceCUDA.h):
/// the JIT's code then reads and writes the application's own variable.
bool relink_through_pointer(Module& m, GlobalVariable* gv, std::string& why) {
  // clang keeps every __device__ variable in llvm.compiler.used: not a use of the code's.
  removeFromUsedLists(m, [&](Constant* c) { return c->stripPointerCasts() == gv; });
  convertUsersOfConstantsToInstructions({gv});
  for (User* u : gv->users())
    if (!isa<Instruction>(u)) return why = "it is used by a constant initializer", false;
  LLVMContext& ctx = m.getContext();
  unsigned space = gv->getAddressSpace();
  auto* type = PointerType::get(ctx, space);
  auto* poison = ConstantExpr::getIntToPtr(ConstantInt::get(Type::getInt64Ty(ctx), 0xDEADBEEFDEADBEEFull), type);
  auto* slot = new GlobalVariable(m, type, false, GlobalValue::ExternalLinkage, poison, gv->getName() + "$ptr", nullptr,
                                  GlobalValue::NotThreadLocal, space, /*isExternallyInitialized=*/true);
  for (Use& use : make_early_inc_range(gv->uses())) {
    auto* user = cast<Instruction>(use.getUser());
    Instruction* at = user;
    if (auto* phi = dyn_cast<PHINode>(user)) at = phi->getIncomingBlock(use)->getTerminator();
    IRBuilder<> b(at);
    use.set(b.CreateLoad(type, slot, gv->getName() + ".addr"));
  }
  gv->eraseFromParent();  // the module's own copy: no longer read
  return true;
}

CodeGenOptLevel codegen_level(unsigned level) {
  switch (level) {
    case 0: return CodeGenOptLevel::None;
    case 1: return CodeGenOptLevel::Less;
    case 2: return CodeGenOptLevel::Default;
    default: return CodeGenOptLevel::Aggressive;
  }
}

OptimizationLevel opt_level(unsigned level) {
  switch (level) {
    case 0: return OptimizationLevel::O0;
    case 1: return OptimizationLevel::O1;
    case 2: return OptimizationLevel::O2;
    default: return OptimizationLevel::O3;
  }
}

/// The default per-module pipeline at `level` with the target's callbacks (NVVMReflect ...):
/// Proteus runOptimizationPassPipeline (CoreLLVM.h) with PROTEUS_OPT_LEVEL.
void optimize(Module& m, TargetMachine& tm, unsigned level) {
  LoopAnalysisManager lam;
  FunctionAnalysisManager fam;
  CGSCCAnalysisManager cgam;
  ModuleAnalysisManager mam;
  PassBuilder pb(&tm);  // registers the target's pass callbacks
  TargetLibraryInfoImpl tlii(m.getTargetTriple());
  fam.registerPass([&] { return TargetLibraryAnalysis(tlii); });
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  ModulePassManager mpm = level == 0 ? pb.buildO0DefaultPipeline(OptimizationLevel::O0)
                                     : pb.buildPerModuleDefaultPipeline(opt_level(level));
  mpm.run(m, mam);
}

}  // namespace

const char* llvm_version() { return "LLVM " LLVM_VERSION_STRING; }

bool specialize_and_compile(const Request& r, Result& out) {
  static std::once_flag init;
  std::call_once(init, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
  auto fail = [&](const std::string& why) {
    out.error = r.kernel + ": " + why;
    return false;
  };
  if (r.modules.empty()) return fail("no IR");
  LLVMContext ctx;
  // The kernel's modules, linked into one (Proteus BinaryInfo::getLinkedModule, JitEngineDevice.h).
  std::unique_ptr<Module> m;
  for (size_t i = 0; i < r.modules.size(); ++i) {
    MemoryBufferRef buffer(StringRef(static_cast<const char*>(r.modules[i].first), r.modules[i].second),
                           "kir-ir-" + std::to_string(i));
    Expected<std::unique_ptr<Module>> parsed = parseBitcodeFile(buffer, ctx);
    if (!parsed) return fail("IR module " + std::to_string(i) + ": " + toString(parsed.takeError()));
    if (!m) m = std::move(*parsed);
    else if (Linker::linkModules(*m, std::move(*parsed)))
      return fail("IR module " + std::to_string(i) + " does not link");
  }
  Function* kernel = m->getFunction(r.kernel);
  if (!kernel || kernel->isDeclaration()) return fail("not defined in its IR");

  // Only the kernel and what it reaches (Proteus pruneIR/internalize, CoreLLVM.h).
  internalizeModule(*m, [&](const GlobalValue& gv) { return gv.getName() == r.kernel; });
  {
    ModuleAnalysisManager mam;
    PassBuilder().registerModuleAnalyses(mam);
    GlobalDCEPass().run(*m, mam);
  }

  Triple triple = m->getTargetTriple();
  if (triple.getArch() != Triple::nvptx64) return fail("IR for " + triple.str() + ", not nvptx64");
  std::string error;
  const Target* target = TargetRegistry::lookupTarget(triple, error);
  if (!target) return fail(error);
  std::unique_ptr<TargetMachine> tm(target->createTargetMachine(triple, r.arch, "", TargetOptions(), std::nullopt,
                                                                std::nullopt, codegen_level(r.codegen_opt_level)));
  if (!tm) return fail("no target machine for " + r.arch);
  m->setDataLayout(tm->createDataLayout());

  // Arguments to constants (Proteus specializeIR -> TransformArgumentSpecialization::transform).
  if (r.specialize_args)
    for (const RuntimeConstant& rc : r.constants) {
      if (rc.position == 0 || rc.position > kernel->arg_size())
        return fail("runtime constant at position " + std::to_string(rc.position) + " past the parameters");
      Argument& arg = *kernel->getArg(rc.position - 1);
      std::string why;
      Constant* c = constant_for(*m, arg, rc, why);
      if (!c) return fail("argument " + std::to_string(rc.position) + ": " + why);
      arg.replaceAllUsesWith(c);
    }
  // gridDim / blockDim to constants (Proteus setKernelDims, CoreLLVMDevice.h; the NVVM
  // intrinsics' names as CoreLLVMCUDA.h's detail::gridDimXFnName ... list them).
  if (r.specialize_dims) {
    static const char* const grid[] = {"llvm.nvvm.read.ptx.sreg.nctaid.x", "llvm.nvvm.read.ptx.sreg.nctaid.y",
                                       "llvm.nvvm.read.ptx.sreg.nctaid.z"};
    static const char* const block[] = {"llvm.nvvm.read.ptx.sreg.ntid.x", "llvm.nvvm.read.ptx.sreg.ntid.y",
                                        "llvm.nvvm.read.ptx.sreg.ntid.z"};
    for (int i = 0; i < 3; ++i) {
      replace_calls(*m, grid[i], r.grid[i]);
      replace_calls(*m, block[i], r.block[i]);
    }
  }
  // Launch bounds (Proteus setLaunchBoundsForKernel, CoreLLVMCUDA.h: LLVM 22 reads the
  // nvvm.maxntid / nvvm.minctasm function attributes).
  if (r.specialize_launch_bounds) {
    uint64_t threads = uint64_t(r.block[0]) * r.block[1] * r.block[2];
    kernel->addFnAttr("nvvm.maxntid", std::to_string(std::min<uint64_t>(1024, threads)));
    if (r.min_blocks) kernel->addFnAttr("nvvm.minctasm", std::to_string(r.min_blocks));
  }
  // Device globals through NAME$ptr (Proteus replaceGlobalVariablesWithPointers).
  for (const std::string& name : r.globals) {
    GlobalVariable* gv = m->getNamedGlobal(name);
    if (!gv || gv->use_empty()) continue;
    std::string why;
    if (!relink_through_pointer(*m, gv, why)) return fail("device global " + name + ": " + why);
    out.relinked.push_back(name);
  }
  if (verifyModule(*m, &errs())) return fail("the specialized module does not verify");

  optimize(*m, *tm, r.opt_level);  // Proteus optimizeIR (CoreLLVM.h), PROTEUS_OPT_LEVEL

  // NVPTX codegen to PTX text (Proteus codegenPTX, CoreLLVMCUDA.h).
  SmallVector<char, 0> ptx;
  raw_svector_ostream os(ptx);
  legacy::PassManager pm;
  pm.add(new TargetLibraryInfoWrapperPass(TargetLibraryInfoImpl(m->getTargetTriple())));
  if (tm->addPassesToEmitFile(pm, os, nullptr, CodeGenFileType::AssemblyFile))
    return fail("the NVPTX target cannot emit PTX");
  pm.run(*m);
  out.ptx.assign(ptx.begin(), ptx.end());
  out.ptx.push_back('\0');  // the driver reads PTX up to its NUL
  return true;
}

}  // namespace proteus_client
