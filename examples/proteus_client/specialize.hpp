// The LLVM half of the Proteus-style client: what Proteus's CompilationTask::compile
// does to a kernel's IR (src/include/proteus/impl/CompilationTask.h), written on LLVM 22
// alone. Nothing here knows of kir: the client (client.cpp) hands in the IR modules kir
// extracted, the values kir hashed into the JIT key, the launch's dimensions and the names
// of the registration's device globals, and gets PTX back.
#ifndef PROTEUS_CLIENT_SPECIALIZE_HPP
#define PROTEUS_CLIENT_SPECIALIZE_HPP

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace proteus_client {

/// One runtime-constant argument with the bytes of its value (kir_jit_arg's description).
struct RuntimeConstant {
  uint32_t position = 0;  ///< 1-based kernel parameter position
  uint8_t kind = 0;       ///< kir_jit_arg_kind: scalar, array, object
  uint8_t type = 0;       ///< kir_arg_type (the scalar's, or the array's elements')
  uint8_t by_value = 0;   ///< arrays/objects: the bytes are the argument's own (not behind a pointer)
  std::vector<unsigned char> bytes;
};

struct Request {
  std::vector<std::pair<const void*, size_t>> modules;  ///< bitcode, in kir's order
  std::string kernel;                                   ///< mangled name
  std::string arch;                                     ///< "sm_90"
  std::vector<RuntimeConstant> constants;
  bool specialize_args = true, specialize_dims = true, specialize_launch_bounds = true;
  uint32_t grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  uint32_t min_blocks = 0;           ///< launch bounds' minimum blocks per SM (0: none)
  std::vector<std::string> globals;  ///< the registration's device globals (relinked through NAME$ptr)
  unsigned opt_level = 3, codegen_opt_level = 3;
};

struct Result {
  std::string ptx;                    ///< NUL-terminated text, as cuModuleLoadData reads it
  std::vector<std::string> relinked;  ///< globals the code reads through NAME$ptr
  std::string error;                  ///< why there is no PTX
};

/// Specialize request.kernel and compile it to PTX: false with result.error on failure.
bool specialize_and_compile(const Request& request, Result& result);

/// "LLVM 22.1.x": what built the code (a CONFIG record of the key).
const char* llvm_version();

}  // namespace proteus_client

#endif
