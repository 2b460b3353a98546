// The C ABI (kir/kir.h) over the C++ core.
#include "kir/kir.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "kir/binary.hpp"
#include "kir/hash/kernel_code.hpp"

namespace {

using kir::ImageKind;
using kir::TargetKind;
// kir.h's numbers are the model's enum values.
static_assert(KIR_KIND_UNKNOWN == unsigned(ImageKind::unknown) && KIR_KIND_CUBIN == unsigned(ImageKind::cubin) &&
              KIR_KIND_PTX == unsigned(ImageKind::ptx) && KIR_KIND_LTO_IR == unsigned(ImageKind::lto_ir) &&
              KIR_KIND_OLD_CUBIN == unsigned(ImageKind::old_cubin) &&
              KIR_KIND_CODE_OBJECT == unsigned(ImageKind::code_object) &&
              KIR_KIND_BITCODE == unsigned(ImageKind::bitcode) && KIR_KIND_FATBIN == unsigned(ImageKind::fatbin) &&
              KIR_KIND_SPIRV == unsigned(ImageKind::spirv) && KIR_KIND_OBJECT == unsigned(ImageKind::object) &&
              KIR_KIND_HOST == unsigned(ImageKind::host) && KIR_KIND_EMPTY == unsigned(ImageKind::empty) &&
              KIR_KIND_EMPTY + 1 == kir::kImageKinds);
static_assert(KIR_TARGET_NONE == unsigned(TargetKind::none) && KIR_TARGET_CUDA == unsigned(TargetKind::cuda) &&
              KIR_TARGET_AMDGPU == unsigned(TargetKind::amdgpu) && KIR_TARGET_HOST == unsigned(TargetKind::host) &&
              KIR_TARGET_HOST + 1 == kir::kTargetKinds);

// kir.h's error numbers are the core's ErrorCode values.
using kir::ErrorCode;
static_assert(KIR_ERROR_NONE == unsigned(ErrorCode::none) && KIR_ERROR_BAD_MAGIC == unsigned(ErrorCode::bad_magic) &&
              KIR_ERROR_TRUNCATED == unsigned(ErrorCode::truncated) &&
              KIR_ERROR_OUT_OF_BOUNDS == unsigned(ErrorCode::out_of_bounds) &&
              KIR_ERROR_MALFORMED == unsigned(ErrorCode::malformed) &&
              KIR_ERROR_UNSUPPORTED_VERSION == unsigned(ErrorCode::unsupported_version) &&
              KIR_ERROR_UNSUPPORTED == unsigned(ErrorCode::unsupported) &&
              KIR_ERROR_CORRUPT == unsigned(ErrorCode::corrupt) &&
              KIR_ERROR_TOO_LARGE == unsigned(ErrorCode::too_large) && KIR_ERROR_IO == unsigned(ErrorCode::io) &&
              KIR_ERROR_PERMISSION == unsigned(ErrorCode::permission) &&
              KIR_ERROR_NOT_FOUND == unsigned(ErrorCode::not_found) &&
              KIR_ERROR_INVALID_ARGUMENT == unsigned(ErrorCode::invalid_argument) &&
              KIR_ERROR_INTERNAL == unsigned(ErrorCode::internal) && KIR_ERROR_INTERNAL + 1 == kir::kErrorCodes);
static_assert(KIR_NO_OFFSET == kir::kNoOffset);

// Frozen layouts (docs/abi.md; LP64, the only data model kir builds for): a
// field appended to a struct after its first version stays where it is, so a
// caller's struct_size tells which fields it has.
static_assert(sizeof(void*) == 8, "kir's C ABI is LP64");
static_assert(offsetof(kir_image_info, obfuscated) == 64 && offsetof(kir_image_info, kind_name) == 72 &&
                  offsetof(kir_image_info, target) == 80 && offsetof(kir_image_info, triple) == 88,
              "kir_image_info: ABI 2's fields moved");
static_assert(offsetof(kir_image_info, image_kind) == 96 && offsetof(kir_image_info, target_kind) == 100,
              "kir_image_info: ABI 4's fields moved");
static_assert(offsetof(kir_jit_key_input, user) == 144 && offsetof(kir_jit_key_input, captures) == 152 &&
                  offsetof(kir_jit_key_input, capture_count) == 160 && offsetof(kir_jit_key_input, prefix) == 168,
              "kir_jit_key_input: the fields after `user` moved");
static_assert(offsetof(kir_jit_key_input, config_records) == 176 &&
                  offsetof(kir_jit_key_input, config_records_size) == 184,
              "kir_jit_key_input: ABI 8's fields moved");

/// The calling thread's last failure (kir_last_error, _code, _offset).
struct LastError {
  std::string text;
  ErrorCode code = ErrorCode::none;
  uint64_t offset = kir::kNoOffset;
};
thread_local LastError last_error;

int fail(const kir::Error& e) {
  last_error.text = e.message();
  last_error.code = e.code();
  last_error.offset = e.raw_offset();
  return -1;
}

/// A failure of the call itself (a NULL handle, an index out of range).
int fail(const std::string& message, ErrorCode code = ErrorCode::invalid_argument) {
  return fail(kir::Error(code, message));
}

/// Copy `src` into the caller's struct, no more than the caller's struct_size.
template <class T>
void copy_out(const T& src, T* dst) {
  uint32_t n = std::min<uint32_t>(dst->struct_size, sizeof(T));
  std::memcpy(dst, &src, n);
  dst->struct_size = n;
}

}  // namespace

namespace kir::detail {
// For the C ABI's other files (core/cache/c_api.cpp): set kir_last_error() and
// its code and offset; -1.
int set_last_error(const kir::Error& error) { return fail(error); }
int set_last_error(const std::string& message) { return fail(message); }
}  // namespace kir::detail

struct kir_binary {
  explicit kir_binary(kir::Binary b) : binary(std::move(b)) {
    for (uint32_t c = 0; c < binary.containers().size(); ++c)
      for (uint32_t i = 0; i < binary.containers()[c].images.size(); ++i) images.emplace_back(c, i);
  }

  const kir::Image& image(size_t i) const { return binary.containers()[images[i].first].images[images[i].second]; }

  /// Decoded device code of image `i`, cached; nullptr with last_error set.
  const kir::DeviceCode* code(size_t i) const {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = codes.find(i);
    if (it != codes.end()) return &it->second;
    kir::Expected<kir::DeviceCode> c = binary.device_code(images[i].first, images[i].second);
    if (!c) {
      fail(c.error());
      return nullptr;
    }
    return &codes.emplace(i, std::move(*c)).first->second;
  }

  kir::Binary binary;
  std::vector<std::pair<uint32_t, uint32_t>> images;
  mutable std::mutex mutex;
  mutable std::map<size_t, kir::DeviceCode> codes;
};

extern "C" {

#define KIR_STRINGIFY_(x) #x
#define KIR_STRINGIFY(x) KIR_STRINGIFY_(x)
const char* kir_version(void) {
  return KIR_STRINGIFY(KIR_VERSION_MAJOR) "." KIR_STRINGIFY(KIR_VERSION_MINOR) "." KIR_STRINGIFY(KIR_VERSION_PATCH);
}

const char* kir_last_error(void) { return last_error.text.c_str(); }

uint32_t kir_abi_version(void) { return KIR_ABI_VERSION; }

int kir_last_error_code(void) { return static_cast<int>(last_error.code); }

uint64_t kir_last_error_offset(void) { return last_error.offset; }

kir_binary* kir_binary_open(const char* path, unsigned flags) {
  if (!path) return fail("kir_binary_open: path is NULL"), nullptr;
  kir::BinaryOptions options;
  options.scan = (flags & KIR_OPEN_SCAN) != 0;
  options.scan_data = (flags & KIR_OPEN_SECTIONS_ONLY) == 0;
  kir::Expected<kir::Binary> b = kir::Binary::open(path, options);
  if (!b) return fail(b.error()), nullptr;
  return new kir_binary(std::move(*b));
}

void kir_binary_close(kir_binary* binary) { delete binary; }

size_t kir_binary_image_count(const kir_binary* binary) { return binary ? binary->images.size() : 0; }

static bool check_image(const kir_binary* binary, size_t index) {
  if (!binary) return fail("binary handle is NULL"), false;
  if (index >= binary->images.size())
    return fail("image index " + std::to_string(index) + " out of range (" + std::to_string(binary->images.size()) +
                " images)"),
           false;
  return true;
}

int kir_binary_image_info(const kir_binary* binary, size_t index, kir_image_info* out) {
  if (!check_image(binary, index) || !out) return -1;
  const kir::Image& image = binary->image(index);
  kir_image_info info{};
  info.struct_size = sizeof info;
  info.container = binary->images[index].first;
  info.entry = binary->images[index].second;
  if (const std::optional<kir::FatbinEntry>& e = image.fatbin) {
    info.kind = e->kind;
    info.major = e->major;
    info.minor = e->minor;
    info.arch = e->arch;
    info.flags = e->flags;
    info.obfuscated = e->obfuscated() ? 1 : 0;
  }
  info.compression = static_cast<uint32_t>(image.compression);
  info.file_offset = image.file_offset.value_or(UINT64_MAX);
  info.stored_size = image.stored.size();
  info.image_size = image.size;
  info.kind_name = kir::name(image.kind);
  info.target = image.target.c_str();
  info.triple = image.triple.c_str();
  info.image_kind = static_cast<uint32_t>(image.kind);
  info.target_kind = static_cast<uint32_t>(image.target_kind());
  copy_out(info, out);
  return 0;
}

int64_t kir_binary_read_image(const kir_binary* binary, size_t index, void* buffer, size_t capacity) {
  if (!check_image(binary, index)) return -1;
  kir::Scratch scratch;
  kir::Expected<kir::ByteView> bytes = kir::decode_image(binary->image(index), scratch);
  if (!bytes) return fail(bytes.error());
  if (buffer) std::memcpy(buffer, bytes->data(), std::min<size_t>(capacity, bytes->size()));
  return static_cast<int64_t>(bytes->size());
}

int64_t kir_binary_kernel_count(const kir_binary* binary, size_t index) {
  if (!check_image(binary, index)) return -1;
  const kir::DeviceCode* code = binary->code(index);
  return code ? static_cast<int64_t>(code->kernels.size()) : -1;
}

static const kir::Kernel* find_kernel(const kir_binary* binary, size_t index, size_t kernel) {
  if (!check_image(binary, index)) return nullptr;
  const kir::DeviceCode* code = binary->code(index);
  if (!code) return nullptr;
  if (kernel >= code->kernels.size()) return fail("kernel index " + std::to_string(kernel) + " out of range"), nullptr;
  return &code->kernels[kernel];
}

int kir_binary_kernel_info(const kir_binary* binary, size_t index, size_t kernel, kir_kernel_info* out) {
  const kir::Kernel* k = find_kernel(binary, index, kernel);
  if (!k || !out) return -1;
  kir_kernel_info info{};
  info.struct_size = sizeof info;
  info.name = k->name.c_str();
  info.param_count = static_cast<uint32_t>(k->params.size());
  info.param_bytes = k->param_bytes ? int64_t(*k->param_bytes) : -1;
  info.registers = k->registers ? int32_t(*k->registers) : -1;
  info.shared_bytes = k->shared_bytes ? int64_t(*k->shared_bytes) : -1;
  copy_out(info, out);
  return 0;
}

int kir_binary_kernel_param(const kir_binary* binary, size_t index, size_t kernel, size_t param,
                            kir_kernel_param* out) {
  const kir::Kernel* k = find_kernel(binary, index, kernel);
  if (!k || !out) return -1;
  if (param >= k->params.size()) return fail("parameter index out of range");
  kir_kernel_param p{sizeof(kir_kernel_param), k->params[param].ordinal, k->params[param].offset,
                     k->params[param].size};
  copy_out(p, out);
  return 0;
}

int64_t kir_binary_kernel_ir_count(const kir_binary* binary, size_t index, size_t kernel) {
  const kir::Kernel* k = find_kernel(binary, index, kernel);
  if (!k) return -1;
  kir::KernelCode c = kir::kernel_code(*binary->code(index), k->name);
  return c.kind == kir::CodeKind::ir ? int64_t(c.modules.size()) : 0;
}

int kir_binary_kernel_ir(const kir_binary* binary, size_t index, size_t kernel, size_t module, kir_bytes* out) {
  const kir::Kernel* k = find_kernel(binary, index, kernel);
  if (!k || !out) return k ? fail("kir_binary_kernel_ir: NULL out") : -1;
  const kir::DeviceCode* code = binary->code(index);
  kir::KernelCode c = kir::kernel_code(*code, k->name);
  size_t n = c.kind == kir::CodeKind::ir ? c.modules.size() : 0;
  if (module >= n)
    return fail("IR module index " + std::to_string(module) + " out of range: kernel " + k->name + " has " +
                std::to_string(n));
  const std::vector<uint8_t>& bitcode = code->ir[c.modules[module]].bitcode;
  out->data = bitcode.data();
  out->size = bitcode.size();
  return 0;
}

}  // extern "C"

// ---- hashes ---------------------------------------------------------------

#include <new>

#include "kir/hash/hash.hpp"
#include "kir/hash/jit_key.hpp"
#include "kir/hash/proteus.hpp"

static_assert(sizeof(kir_dynamic_hash) >= sizeof(kir::DynamicHash), "kir_dynamic_hash too small");
static_assert(alignof(kir_dynamic_hash) >= alignof(kir::DynamicHash), "kir_dynamic_hash misaligned");

namespace {

std::vector<kir::ByteView> views(const kir_bytes* modules, size_t count) {
  std::vector<kir::ByteView> out;
  for (size_t i = 0; i < count; ++i) out.emplace_back(static_cast<const uint8_t*>(modules[i].data), modules[i].size);
  return out;
}

kir::DynamicHash* builder(kir_dynamic_hash* h) { return std::launder(reinterpret_cast<kir::DynamicHash*>(h->opaque)); }

kir_hash128 to_c(const kir::Hash128& h) { return {h.high, h.low}; }

}  // namespace

extern "C" {

kir_hash128 kir_static_hash(const char* name, const char* code_kind, const kir_bytes* modules, size_t count) {
  return to_c(kir::static_hash(name ? name : "", code_kind ? code_kind : "", views(modules, count)));
}

kir_hash128 kir_static_hash_of_kind(const char* name, uint32_t code_kind, const kir_bytes* modules, size_t count) {
  if (code_kind >= kir::kCodeKinds) {
    fail("code kind " + std::to_string(code_kind) + " is not a KIR_CODE_KIND_* value (0.." +
         std::to_string(kir::kCodeKinds - 1) + ")");
    return {0, 0};
  }
  return kir_static_hash(name, kir::name(static_cast<kir::CodeKind>(code_kind)), modules, count);
}

void kir_dynamic_hash_begin(kir_dynamic_hash* h, kir_hash128 static_hash, const char* arch) {
  new (h->opaque) kir::DynamicHash({static_hash.high, static_hash.low}, arch ? arch : "");
}

void kir_launch_identity_begin(kir_dynamic_hash* h, kir_hash128 static_hash, const char* arch) {
  new (h->opaque)
      kir::DynamicHash(kir::HashDomain::launch_identity, {static_hash.high, static_hash.low}, arch ? arch : "");
}

void kir_dynamic_hash_extend(kir_dynamic_hash* h, const kir_dynamic_hash* prefix) {
  new (h->opaque) kir::DynamicHash(
      kir::DynamicHash::extend(*std::launder(reinterpret_cast<const kir::DynamicHash*>(prefix->opaque))));
}

void kir_dynamic_hash_shared(kir_dynamic_hash* h, uint64_t bytes) { builder(h)->shared(bytes); }

void kir_dynamic_hash_specialize(kir_dynamic_hash* h, uint32_t flags) { builder(h)->specialize(flags); }

void kir_dynamic_hash_capture(kir_dynamic_hash* h, const char* lambda, uint32_t slot, uint32_t offset, uint8_t type,
                              const void* value, size_t size) {
  builder(h)->capture(lambda ? lambda : "", slot, offset, static_cast<kir::ArgType>(type), value, size);
}

int kir_jit_key(const kir_jit_key_input* in, kir_hash128* out) {
  if (!in || !out) return fail("kir_jit_key: input or output is NULL");
  kir::Expected<kir::Hash128> key = kir::jit_key(*in);
  if (!key) return fail(key.error().within("JIT key"));
  *out = to_c(*key);
  return 0;
}

size_t kir_jit_config_records(const kir_config_item* items, size_t count, void* out, size_t capacity) {
  if (count && !items) return fail("kir_jit_config_records: items is NULL, count " + std::to_string(count)), 0;
  std::string bytes;
  for (size_t i = 0; i < count; ++i) {
    const kir_config_item& c = items[i];
    if (!c.key) return fail("kir_jit_config_records: item #" + std::to_string(i) + ": key is NULL"), 0;
    if (!c.value && c.size) return fail("kir_jit_config_records: item '" + std::string(c.key) + "': value is NULL"), 0;
    kir::encode_config_record(bytes, c.key, std::string_view(static_cast<const char*>(c.value), c.size));
  }
  if (out && capacity >= bytes.size()) std::memcpy(out, bytes.data(), bytes.size());
  return bytes.size();
}

kir_hash128 kir_launch_identity(kir_hash128 static_hash, const char* arch, void* const* args,
                                const uint32_t* param_sizes, uint32_t param_count, const uint32_t grid[3],
                                const uint32_t block[3], uint64_t shared_bytes) {
  static const uint32_t ones[3] = {1, 1, 1};
  return to_c(kir::launch_identity({static_hash.high, static_hash.low}, arch ? arch : "", args, param_sizes,
                                   param_count, grid ? grid : ones, block ? block : ones, shared_bytes));
}

void kir_dynamic_hash_arg(kir_dynamic_hash* h, uint32_t position, uint8_t type, const void* value, size_t size) {
  builder(h)->arg(position, static_cast<kir::ArgType>(type), value, size);
}

void kir_dynamic_hash_grid(kir_dynamic_hash* h, uint32_t x, uint32_t y, uint32_t z) { builder(h)->grid(x, y, z); }

void kir_dynamic_hash_block(kir_dynamic_hash* h, uint32_t x, uint32_t y, uint32_t z) { builder(h)->block(x, y, z); }

void kir_dynamic_hash_bounds(kir_dynamic_hash* h, uint32_t max_threads, uint32_t min_blocks) {
  builder(h)->bounds(max_threads, min_blocks);
}

void kir_dynamic_hash_config(kir_dynamic_hash* h, const char* key, const void* value, size_t size) {
  builder(h)->config(key ? key : "", std::string_view(static_cast<const char*>(value), size));
}

kir_hash128 kir_dynamic_hash_finish(kir_dynamic_hash* h) {
  kir::Hash128 out = builder(h)->finish();
  builder(h)->~DynamicHash();
  return to_c(out);
}

void kir_hash_to_hex(kir_hash128 hash, char out[33]) {
  std::string hex = kir::Hash128{hash.high, hash.low}.hex();
  std::memcpy(out, hex.c_str(), 33);
}

int kir_hash_from_hex(const char* text, kir_hash128* out) {
  std::optional<kir::Hash128> h = kir::Hash128::from_hex(text ? text : "");
  if (!h || !out) return fail(std::string("not a kir hash (32 lowercase hex digits): '") + (text ? text : "") + "'");
  *out = to_c(*h);
  return 0;
}

uint64_t kir_proteus_static_hash(const char* name, const kir_bytes* modules, size_t count, int llvm20_or_newer) {
  return kir::proteus_static_hash(name ? name : "", views(modules, count), llvm20_or_newer != 0);
}

}  // extern "C"
