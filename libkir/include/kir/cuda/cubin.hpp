// Cubins: the kernels, functions and globals of a CUDA ELF.
//
// Cubins (CUDA ELF, e_machine 190) record per-kernel attributes in
// `.nv.info.<kernel>` and per-module ones in `.nv.info`, as a list of EIATTR
// records: u8 format, u8 attribute, then
//   format 1 (NVAL) u16 unused       format 2 (BVAL) u8 value, u8 unused
//   format 3 (HVAL) u16 value        format 4 (SVAL) u16 size, size bytes
// Attributes decoded here (values read off cubins built by nvcc 13):
//   0x17 KPARAM_INFO  {u32 index, u16 ordinal, u16 offset, u32 bits}, size = bits >> 18
//   0x19 CBANK_PARAM_SIZE  (HVAL) total parameter bytes
//   0x2f REGCOUNT     {u32 symbol index, u32 registers}      (in .nv.info)
//   0x11 FRAME_SIZE   {u32 symbol index, u32 bytes}           (in .nv.info)
//   0x05 MAX_THREADS  {u32 x, u32 y, u32 z}  (__launch_bounds__)
//   0x10 REQNTID      {u32 x, u32 y, u32 z}  (required block size)
//   0x3d CTA_PER_CLUSTER {u32 x, u32 y, u32 z} (__cluster_dims__)
// A function is a kernel (an entry point) when the cubin has a parameter
// constant bank `.nv.constant0.<name>` for it. Static shared memory is the size
// of `.nv.shared.<name>`.
#pragma once

#include "kir/device_code.hpp"

namespace kir {

/// Kernels, functions and globals of a CUDA ELF (cubin), and the IR the
/// Proteus pass embedded in it (`_jit_bitcode_*` globals of `.nv.global.init`).
Expected<DeviceCode> parse_cubin(ByteView cubin);

}  // namespace kir
