// Unit tests of libkir's readers on inputs the tests write themselves, with
// the exact error texts asserted. Real binaries are covered by the Python
// suite; these pin the bounds checks and messages at the C++ level.
#include <lz4.h>
#include <zstd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <optional>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kir/binary.hpp"
#include "../../libkir/core/discover/scan.hpp"
#include "kir/amdgpu/code_object.hpp"
#include "kir/cuda/cubin.hpp"
#include "kir/cuda/ptx.hpp"
#include "kir/support/demangle.hpp"
#include "kir/cuda/fatbin.hpp"
#include "kir/discover.hpp"
#include "kir/kir.h"
#include "kir/object/archive.hpp"
#include "kir/hash/hash.hpp"
#include "kir/llvm/offload_bundle.hpp"
#include "kir/model.hpp"
#include "kir/object/elf.hpp"
#include "kir/support/compression.hpp"
#include "kir/support/md5.hpp"
#include "kir/support/msgpack.hpp"
#include "kir/record/metadata.hpp"

#include <atomic>

// Every operator new of the process, counted (count_allocations.cpp): the JIT
// key's hot path (extend a prefix, kir_jit_key) must not allocate.
extern std::atomic<long> kir_test_allocations;
static std::atomic<long>& allocations = kir_test_allocations;

namespace {

int failures = 0;
int checks = 0;

#define CHECK(cond)                                                          \
  do {                                                                       \
    ++checks;                                                                \
    if (!(cond)) {                                                           \
      ++failures;                                                            \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                        \
  } while (0)

#define CHECK_ERROR(expected, text)                                                   \
  do {                                                                                \
    ++checks;                                                                         \
    if ((text) != (expected)) {                                                       \
      ++failures;                                                                     \
      std::fprintf(stderr, "%s:%d: error text\n  expected: %s\n  got:      %s\n",    \
                   __FILE__, __LINE__, std::string(expected).c_str(),                 \
                   std::string(text).c_str());                                        \
    }                                                                                 \
  } while (0)

using Bytes = std::vector<uint8_t>;

template <class T>
void put(Bytes& b, size_t off, T v) {
  if (b.size() < off + sizeof v) b.resize(off + sizeof v);
  std::memcpy(b.data() + off, &v, sizeof v);
}

kir::ByteView view(const Bytes& b) { return kir::ByteView(b.data(), b.size()); }

/// A fatbin entry: 64-byte header then payload (padded to 8).
Bytes entry(uint16_t kind, uint32_t arch, const Bytes& payload, uint64_t flags = 0x11,
            uint32_t compressed = 0, uint64_t uncompressed = 0) {
  Bytes e(64, 0);
  uint64_t padded = (payload.size() + 7) & ~uint64_t(7);
  put<uint16_t>(e, 0x00, kind);
  put<uint16_t>(e, 0x02, 0x0101);
  put<uint32_t>(e, 0x04, 64);
  put<uint64_t>(e, 0x08, padded);
  put<uint32_t>(e, 0x10, compressed);
  put<uint16_t>(e, 0x18, 8);
  put<uint16_t>(e, 0x1A, 1);
  put<uint32_t>(e, 0x1C, arch);
  put<uint64_t>(e, 0x28, flags);
  put<uint64_t>(e, 0x38, uncompressed);
  e.insert(e.end(), payload.begin(), payload.end());
  e.resize(64 + padded, 0);
  return e;
}

Bytes container(const std::vector<Bytes>& entries) {
  Bytes c(16, 0);
  uint64_t size = 0;
  for (const Bytes& e : entries) size += e.size();
  put<uint32_t>(c, 0, kir::kFatbinMagic);
  put<uint16_t>(c, 4, 1);
  put<uint16_t>(c, 6, 16);
  put<uint64_t>(c, 8, size);
  for (const Bytes& e : entries) c.insert(c.end(), e.begin(), e.end());
  return c;
}

void test_byte_view_bounds() {
  Bytes b(16, 0);
  kir::ByteView v = view(b);
  CHECK(v.contains(0, 16));
  CHECK(v.contains(16, 0));
  CHECK(!v.contains(17, 0));
  CHECK(!v.contains(8, UINT64_MAX));      // would wrap as off + n
  CHECK(!v.contains(UINT64_MAX, 2));
  kir::Expected<kir::ByteView> s = v.slice(8, 16, "thing");
  CHECK(!s);
  if (!s)
    CHECK_ERROR("thing at offset 0x8 (size 0x10) runs past the end of its buffer (0x8 bytes left)",
                s.error().message());
  // The code and the offset (in the outermost buffer: the view's origin) travel
  // with the message; within() adds context and keeps both; at() never
  // overrides an inner, more precise offset.
  kir::Expected<kir::ByteView> inner = kir::ByteView(b.data(), b.size(), 0x100).slice(8, 16, "thing");
  CHECK(!inner && inner.error().code() == kir::ErrorCode::out_of_bounds && inner.error().offset() == 0x108u);
  if (!inner) {
    kir::Error e = inner.error();
    e.within("entry #3").at(0x20);
    CHECK(e.code() == kir::ErrorCode::out_of_bounds && e.offset() == 0x108u);
    CHECK(e.message().rfind("entry #3: thing at offset 0x8", 0) == 0);
  }
  CHECK(!kir::Error(kir::ErrorCode::io, "x").offset() && kir::Error(kir::ErrorCode::io, "x").at(4).offset() == 4u);
  CHECK(kir::Error("no code given").code() == kir::ErrorCode::internal);
  CHECK(std::string(kir::error_code_name(kir::ErrorCode::unsupported_version)) == "unsupported_version");
  CHECK(kir::errno_code(ENOENT) == kir::ErrorCode::not_found && kir::errno_code(EACCES) == kir::ErrorCode::permission &&
        kir::errno_code(EIO) == kir::ErrorCode::io);
  CHECK(kir::align_up(UINT64_MAX - 2, 8) == UINT64_MAX);
  CHECK(kir::align_up(9, 8) == 16);
}

void test_fatbin_roundtrip() {
  Bytes ptx = {'.', 'v', 'e', 'r', 's', 'i', 'o', 'n', ' ', '8', '\0'};
  Bytes c = container({entry(1, 90, ptx), entry(2, 80, Bytes(24, 0xAB))});
  kir::Expected<kir::FatbinContainer> f = kir::FatbinContainer::create(view(c));
  CHECK(f.ok());
  if (!f) return;
  CHECK(f->entries().size() == 2);
  CHECK(f->entries()[0].kind == 1 && f->entries()[0].arch == 90);
  CHECK(f->entries()[1].offset == 16 + 64 + 16);
  CHECK(f->entries()[1].payload.size() == 24);
  kir::Expected<std::vector<uint8_t>> data = kir::read_image(f->entries()[1]);
  CHECK(data.ok() && data->size() == 24 && (*data)[0] == 0xAB);
  std::vector<std::string> names = kir::fatbin_flag_names(0x11 | 0x8000 | 0x100000);
  CHECK((names == std::vector<std::string>{"64bit", "linux", "zstd", "0x100000"}));
}

void test_fatbin_errors() {
  Bytes c = container({entry(2, 80, Bytes(24, 1))});
  auto error_of = [](const Bytes& b) {
    kir::Expected<kir::FatbinContainer> f = kir::FatbinContainer::create(view(b));
    return f ? std::string("(no error)") : f.error().message();
  };
  Bytes bad = c;
  put<uint32_t>(bad, 0, 0x11223344);
  CHECK_ERROR("expected fatbin container magic 0xba55ed50, found 0x11223344", error_of(bad));
  bad = c;
  put<uint16_t>(bad, 4, 2);
  CHECK_ERROR("unsupported fatbin container version 2 at offset 0x4: expected 1", error_of(bad));
  bad = c;
  put<uint64_t>(bad, 8, uint64_t(-8));
  CHECK_ERROR("fatbin container size 0xfffffffffffffff8 (at offset 0x8) runs past the end of its "
              "section (0x58 bytes left)", error_of(bad));
  bad = c;
  put<uint64_t>(bad, 16 + 8, 4096);
  CHECK_ERROR("entry #0 at file offset 0x10: payload size 0x1000 (at offset 0x18) runs past the "
              "end of the container (0x18 bytes left after the header)", error_of(bad));
  bad = c;
  put<uint32_t>(bad, 16 + 4, 8);
  CHECK_ERROR("entry #0 at file offset 0x10: header size 0x8 (at offset 0x14) is not between 0x40 "
              "and the 0x58 bytes left in the container", error_of(bad));
  bad = Bytes(c.begin(), c.begin() + 40);
  put<uint64_t>(bad, 8, 24);
  CHECK_ERROR("entry #0 at file offset 0x10: entry header needs 0x40 bytes, only 0x18 are left in "
              "the container", error_of(bad));
  // Strict mode (scans) refuses unknown kinds that normal parsing reports.
  Bytes odd = container({entry(99, 80, Bytes(8, 0))});
  CHECK(kir::FatbinContainer::create(view(odd)).ok());
  CHECK(!kir::FatbinContainer::create(view(odd), {true}).ok());
}

void test_compression() {
  Bytes text(5000);
  for (size_t i = 0; i < text.size(); ++i) text[i] = uint8_t("kernel "[i % 7]);
  Bytes lz(LZ4_compressBound(int(text.size())));
  int n = LZ4_compress_default(reinterpret_cast<const char*>(text.data()),
                               reinterpret_cast<char*>(lz.data()), int(text.size()), int(lz.size()));
  lz.resize(size_t(n));
  Bytes zs(ZSTD_compressBound(text.size()));
  zs.resize(ZSTD_compress(zs.data(), zs.size(), text.data(), text.size(), 3));

  Bytes c = container({entry(1, 90, lz, 0x11 | 0x2000, uint32_t(lz.size()), text.size()),
                       entry(1, 90, zs, 0x11 | 0x8000, uint32_t(zs.size()), text.size())});
  kir::Expected<kir::FatbinContainer> f = kir::FatbinContainer::create(view(c));
  CHECK(f.ok());
  if (!f) return;
  for (const kir::FatbinEntry& e : f->entries()) {
    kir::Expected<std::vector<uint8_t>> out = kir::read_image(e);
    CHECK(out.ok() && *out == text);
  }
  CHECK(f->entries()[0].compression() == kir::Compression::lz4);
  CHECK(f->entries()[1].compression() == kir::Compression::zstd);
  kir::Expected<std::vector<uint8_t>> bomb = kir::read_image(f->entries()[1], 1024);
  CHECK(!bomb);
  if (!bomb)
    CHECK_ERROR("claimed uncompressed size 0x1388 exceeds the limit 0x400 (compressed size " +
                kir::hex(zs.size()) + ")", bomb.error().message());
  kir::Scratch scratch;
  kir::Expected<kir::ByteView> short_lz = kir::decompress_lz4_block(view(lz), 100, scratch);
  CHECK(!short_lz);
  kir::Expected<kir::ByteView> lz_bomb = kir::decompress_lz4_block(view(lz), 1 << 30, scratch);
  CHECK(!lz_bomb);
  if (!lz_bomb)
    CHECK_ERROR("LZ4 block of " + kir::hex(lz.size()) + " bytes cannot decode to the claimed "
                "0x40000000 bytes (LZ4 expands at most 255:1)", lz_bomb.error().message());
  kir::Expected<kir::ByteView> zs_bigger = kir::decompress_zstd(view(zs), 100, scratch);
  CHECK(!zs_bigger);
  if (!zs_bigger)
    CHECK_ERROR("zstd frame holds 0x1388 bytes, more than the claimed 0x64",
                zs_bigger.error().message());
  kir::Expected<kir::ByteView> plain = kir::decode_image(f->entries()[0], scratch);
  CHECK(plain.ok() && plain->size() == text.size() &&
        std::memcmp(plain->data(), text.data(), text.size()) == 0);
}

void test_elf_errors() {
  Bytes b(64, 0);
  std::memcpy(b.data(), "\x7f" "ELF", 4);
  b[4] = 1;
  kir::Expected<kir::ElfFile> e = kir::ElfFile::create(view(b));
  CHECK(!e);
  if (!e) CHECK_ERROR("unsupported ELF class 1 at offset 0x4: expected 2 (ELF64)", e.error().message());
  b[4] = 2;
  b[5] = 2;
  e = kir::ElfFile::create(view(b));
  if (!e)
    CHECK_ERROR("unsupported ELF data encoding 2 at offset 0x5: expected 1 (little-endian)",
                e.error().message());
  b[5] = 1;
  put<uint64_t>(b, 0x28, 0x1000);
  put<uint16_t>(b, 0x3A, 64);
  put<uint16_t>(b, 0x3C, 3);
  e = kir::ElfFile::create(view(b));
  CHECK(!e);
  if (!e)
    CHECK_ERROR("section header table at offset 0x1000 lies past the end of the file (size 0x40)",
                e.error().message());
  put<uint16_t>(b, 0x3A, 40);
  e = kir::ElfFile::create(view(b));
  if (!e)
    CHECK_ERROR("ELF header has invalid e_shentsize at offset 0x3a: expected 64, got 40",
                e.error().message());
  Bytes tiny = {0x7f, 'E', 'L', 'F', 2, 1};
  e = kir::ElfFile::create(view(tiny));
  if (!e)
    CHECK_ERROR("ELF header truncated: file has 0x6 bytes, the header needs 0x40", e.error().message());
}

Bytes ar_member(const std::string& name, const std::string& data) {
  char header[61];
  std::snprintf(header, sizeof header, "%-16s%-12s%-6s%-6s%-8s%-10zu`\n", name.c_str(), "0", "0",
                "0", "644", data.size());
  Bytes m(header, header + 60);
  m.insert(m.end(), data.begin(), data.end());
  if (m.size() % 2) m.push_back('\n');
  return m;
}

void test_archive() {
  std::string long_name = "a_rather_long_member_name.o";
  Bytes a = {'!', '<', 'a', 'r', 'c', 'h', '>', '\n'};
  for (const Bytes& m : {ar_member("/", "symbols"), ar_member("//", long_name + "/\n"),
                         ar_member("/0", "LONG"), ar_member("short.o/", "abc"),
                         ar_member("#1/6", std::string("bsd.o\0xyz", 9))})
    a.insert(a.end(), m.begin(), m.end());
  kir::Expected<kir::Archive> ar = kir::Archive::create(view(a));
  CHECK(ar.ok());
  if (!ar) return;
  CHECK(ar->members().size() == 3);
  CHECK(ar->members()[0].name == long_name);
  CHECK(ar->members()[0].data.chars() == "LONG");
  CHECK(ar->members()[1].name == "short.o");
  CHECK(ar->members()[2].name == "bsd.o");
  CHECK(ar->members()[2].data.chars() == "xyz");
  Bytes cut(a.begin(), a.end() - 3);
  kir::Expected<kir::Archive> bad = kir::Archive::create(view(cut));
  CHECK(!bad);
}

void test_ptx() {
  std::string ptx =
      ".version 8.0\n.target sm_90\n.address_size 64\n"
      ".global .align 4 .u32 hits;\n"
      ".visible .entry k(\n .param .u64 k_param_0,\n .param .u32 k_param_1,\n"
      " .param .align 8 .b8 k_param_2[24],\n .param .u8 k_param_3\n)\n{\n ret;\n}\n"
      ".visible .entry empty()\n{\n ret;\n}\n";
  kir::Expected<kir::DeviceCode> code =
      kir::parse_ptx(kir::ByteView(reinterpret_cast<const uint8_t*>(ptx.data()), ptx.size()));
  CHECK(code.ok());
  if (!code) return;
  CHECK(code->kernels.size() == 2);
  const kir::Kernel& k = code->kernels[0];
  CHECK(k.name == "k" && k.params.size() == 4);
  CHECK(k.params[1].offset == 8 && k.params[1].size == 4);
  CHECK(k.params[2].offset == 16 && k.params[2].size == 24);
  CHECK(k.params[3].offset == 40 && k.params[3].size == 1);
  CHECK(k.param_bytes && *k.param_bytes == 41);
  CHECK(code->kernels[1].params.empty());
  CHECK(code->globals.size() == 1 && code->globals[0].name == "hits" && code->globals[0].size == 4);
}

void test_md5() {
  // RFC 1321, appendix A.5.
  auto hex_digest = [](const std::string& text) {
    std::array<uint8_t, 16> d = kir::md5(kir::ByteView(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
    std::string out;
    for (uint8_t b : d) out += "0123456789abcdef"[b >> 4], out += "0123456789abcdef"[b & 15];
    return out;
  };
  CHECK(hex_digest("") == "d41d8cd98f00b204e9800998ecf8427e");
  CHECK(hex_digest("abc") == "900150983cd24fb0d6963f7d28e17f72");
  CHECK(hex_digest("message digest") == "f96b697d7cb7938d525a2f31aaf161d0");
  CHECK(hex_digest("12345678901234567890123456789012345678901234567890123456789012345678901234567890") ==
        "57edf4a22be3c955ac49da2e2107b67a");
}

void test_bundle_ids() {
  kir::BundleId a = kir::parse_bundle_id("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack+");
  CHECK(a.kind == "hipv4" && a.triple == "amdgcn-amd-amdhsa-" && a.target == "gfx90a:xnack+");
  kir::BundleId h = kir::parse_bundle_id("host-x86_64-unknown-linux-gnu-");
  CHECK(h.kind == "host" && h.triple == "x86_64-unknown-linux-gnu" && h.target.empty());
}

void test_msgpack() {
  // {"a": [1, -2, "xy"], "b": true}
  Bytes m = {0x82, 0xa1, 'a', 0x93, 0x01, 0xfe, 0xa2, 'x', 'y', 0xa1, 'b', 0xc3};
  kir::Expected<kir::MsgpackValue> v = kir::parse_msgpack(view(m));
  CHECK(v.ok());
  if (!v) return;
  const kir::MsgpackValue* a = v->get("a");
  CHECK(a && a->items.size() == 3 && a->items[1].integer == -2 && a->items[2].string == "xy");
  CHECK(v->get("b") && v->get("b")->integer == 1);
  Bytes bad = {0xdd, 0xff, 0xff, 0xff, 0xff};  // array of 4 billion items in 5 bytes
  CHECK(!kir::parse_msgpack(view(bad)).ok());
}

void test_msgpack_measure() {
  // {"a": [1, -2, "xy"], "b": true}: 8 values (the map, 2 keys, the array, its 3 items, true)
  Bytes m = {0x82, 0xa1, 'a', 0x93, 0x01, 0xfe, 0xa2, 'x', 'y', 0xa1, 'b', 0xc3};
  kir::Expected<kir::MsgpackShape> s = kir::measure_msgpack(view(m), 100, 32);
  CHECK(s.ok() && s->values == 8 && s->depth == 2 && s->size == m.size());
  CHECK(kir::measure_msgpack(view(m), 8, 2).ok());
  kir::Expected<kir::MsgpackShape> few = kir::measure_msgpack(view(m), 7, 32);
  CHECK(!few.ok() && few.error().message() == "msgpack at offset 0xb: more than 7 values");
  kir::Expected<kir::MsgpackShape> shallow = kir::measure_msgpack(view(m), 100, 1);
  CHECK(!shallow.ok() && shallow.error().message() == "msgpack at offset 0x3: containers nested deeper than 1");
  // [[[]]], ext 8 of 2 bytes, fixext 4, a float, then scalars alone
  Bytes nested = {0x91, 0x91, 0x90};
  s = kir::measure_msgpack(view(nested), 10, 3);
  CHECK(s.ok() && s->values == 3 && s->depth == 3);
  Bytes ext = {0x93, 0xc7, 0x02, 0x05, 'a', 'b', 0xd6, 0x01, 1, 2, 3, 4, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0};
  s = kir::measure_msgpack(view(ext), 10, 3);
  CHECK(s.ok() && s->values == 4 && s->depth == 1 && s->size == ext.size());
  Bytes scalar = {0x05, 0xff};
  s = kir::measure_msgpack(view(scalar), 1, 0);
  CHECK(s.ok() && s->values == 1 && s->depth == 0 && s->size == 1);  // trailing bytes are the caller's
  for (Bytes bad : {Bytes{0xdd, 0xff, 0xff, 0xff, 0xff}, Bytes{0xc1}, Bytes{0xda, 0x00}, Bytes{0xa3, 'x'},
                    Bytes{0x92, 0x01}, Bytes{}})
    CHECK(!kir::measure_msgpack(view(bad), 100, 32).ok());
}

void test_hash_c_api_matches_cpp() {
  const char* bc = "BC\xC0\xDE module";
  kir_bytes module{bc, std::strlen(bc)};
  kir_hash128 s = kir_static_hash("_Z1kv", "ir", &module, 1);
  kir::Hash128 cpp = kir::static_hash("_Z1kv", "ir", {kir::ByteView(reinterpret_cast<const uint8_t*>(bc), std::strlen(bc))});
  CHECK(s.high == cpp.high && s.low == cpp.low);

  kir_dynamic_hash h;
  kir_dynamic_hash_begin(&h, s, "sm_90");
  int32_t n = 256;
  kir_dynamic_hash_arg(&h, 1, KIR_ARG_I32, &n, sizeof n);
  kir_dynamic_hash_grid(&h, 4, 1, 1);
  kir_dynamic_hash_block(&h, 256, 1, 1);
  kir_dynamic_hash_config(&h, "opt", "3", 1);
  kir_hash128 d = kir_dynamic_hash_finish(&h);
  kir::Hash128 d2 = kir::DynamicHash(cpp, "sm_90").arg(1, kir::ArgType::i32, n).grid(4, 1, 1)
                        .block(256, 1, 1).config("opt", "3").finish();
  CHECK(d.high == d2.high && d.low == d2.low);
  const kir::DynamicHash prefix(cpp, "sm_90");
  kir::Hash128 d3 = kir::DynamicHash::extend(prefix).arg(1, kir::ArgType::i32, n).grid(4, 1, 1)
                        .block(256, 1, 1).config("opt", "3").finish();
  CHECK(d3 == d2);

  char text[33];
  kir_hash_to_hex(d, text);
  kir_hash128 back{};
  CHECK(kir_hash_from_hex(text, &back) == 0 && back.high == d.high && back.low == d.low);
  CHECK(kir_hash_from_hex("not-a-hash", &back) == -1);
  CHECK(std::string(kir_last_error()).find("not a kir hash") != std::string::npos);

  // A key longer than the inline buffer streams, and still equals the one-shot result.
  std::vector<uint8_t> big(2000, 7);
  kir::Hash128 streamed = kir::DynamicHash(cpp, "sm_90").arg(1, kir::ArgType::bytes, big.data(), big.size()).finish();
  kir::Hash128 again = kir::DynamicHash(cpp, "sm_90").arg(1, kir::ArgType::bytes, big.data(), big.size()).finish();
  CHECK(streamed == again && streamed != d2);
}

int read_host(void* user, uint64_t address, void* out, size_t size) {
  ++*static_cast<int*>(user);  // reads made
  std::memcpy(out, reinterpret_cast<const void*>(static_cast<uintptr_t>(address)), size);
  return 0;
}

/// ABI 10: kir_jit_key returns the values it hashed (kir_jit_key_input.values), each
/// array read from device memory once — for the key and for the client.
void test_jit_key_values() {
  kir_hash128 s = kir_static_hash("_Z4axpydPdi", "ir", nullptr, 0);
  double a = 2.5;
  std::vector<double> coefficients(1100);  // 8800 bytes: more than the key's 4 KiB stack buffer
  for (size_t i = 0; i < coefficients.size(); ++i) coefficients[i] = double(i) / 3;
  double* pointer = coefficients.data();
  int32_t n = 1100;
  struct { double x; int64_t y; } params{1.5, 7};
  void* args[] = {&a, &pointer, &n, &params};
  const uint32_t sizes[] = {8, 8, 4, 16};
  const kir_jit_arg jit_args[] = {  // any order: the values come by increasing position
      {4, KIR_JIT_OBJECT, KIR_ARG_BYTES, 1, 0, 16, 0},
      {1, KIR_JIT_SCALAR, KIR_ARG_F64, 0, 0, 0, 0},
      {2, KIR_JIT_ARRAY, KIR_ARG_F64, 0, KIR_ARG_I32, 0, 3},
  };
  int reads = 0;
  kir_jit_key_input in{};
  in.struct_size = sizeof in;
  in.static_hash = s;
  in.arch = "sm_90";
  in.args = args, in.param_sizes = sizes, in.param_count = 4;
  in.jit_args = jit_args, in.jit_arg_count = 3;
  in.block[0] = 256, in.block[1] = in.block[2] = 1;
  in.read_memory = read_host, in.user = &reads;
  kir_hash128 plain{};
  CHECK(kir_jit_key(&in, &plain) == 0);
  CHECK(reads == 3);  // without values: through the 4 KiB stack buffer, three reads

  // A buffer too small: refused before anything is read, with the size needed.
  kir_jit_value values[3];
  std::memset(values, 0xAB, sizeof values);
  std::vector<unsigned char> bytes(100);
  size_t needed = 0;
  in.values = values, in.value_bytes = bytes.data(), in.value_bytes_capacity = bytes.size();
  in.value_bytes_size = &needed;
  reads = 0;
  kir_hash128 key{};
  CHECK(kir_jit_key(&in, &key) == -1);
  CHECK(kir_last_error_code() == KIR_ERROR_TOO_LARGE);
  CHECK(std::string(kir_last_error()).find("the values need 8832 bytes, value_bytes_capacity is 100") !=
        std::string::npos);
  CHECK(needed == 16 + 8800 + 16 && reads == 0);  // each value at a 16-byte aligned offset

  // Room enough: the same key, the array read once, the values by position.
  bytes.assign(needed, 0);
  in.value_bytes = bytes.data(), in.value_bytes_capacity = bytes.size();
  long before = allocations.load();
  CHECK(kir_jit_key(&in, &key) == 0);
  CHECK(allocations.load() == before);  // still allocation-free
  CHECK(key.high == plain.high && key.low == plain.low);
  CHECK(reads == 1);
  CHECK(values[0].position == 1 && values[0].kind == KIR_JIT_SCALAR && values[0].type == KIR_ARG_F64 &&
        !values[0].from_memory && values[0].count == 1 && values[0].size == 8);
  CHECK(values[0].bytes == bytes.data() && std::memcmp(values[0].bytes, &a, 8) == 0);
  CHECK(values[1].position == 2 && values[1].kind == KIR_JIT_ARRAY && values[1].from_memory &&
        values[1].count == 1100 && values[1].size == 8800);
  CHECK(values[1].bytes == bytes.data() + 16 && std::memcmp(values[1].bytes, coefficients.data(), 8800) == 0);
  CHECK(values[2].position == 4 && values[2].kind == KIR_JIT_OBJECT && !values[2].from_memory &&
        values[2].count == 16 && values[2].size == 16);
  CHECK(values[2].bytes == bytes.data() + 16 + 8800 && std::memcmp(values[2].bytes, &params, 16) == 0);
  // The values are copies: the launch's memory may change, the client's stay.
  coefficients[0] = 99;
  CHECK(std::memcmp(values[1].bytes, coefficients.data(), 8) != 0);
  coefficients[0] = 0;

  // A caller compiled before ABI 10: nothing written through the fields it lacks.
  std::memset(values, 0xAB, sizeof values);
  kir_jit_key_input old = in;
  old.struct_size = offsetof(kir_jit_key_input, values);
  reads = 0;
  CHECK(kir_jit_key(&old, &key) == 0);
  CHECK(key.high == plain.high && key.low == plain.low && reads == 3 && values[0].position == 0xABABABABu);
  // A failed read through the values path is the key's error, as without values.
  in.read_memory = [](void*, uint64_t, void*, size_t) { return 5; };
  CHECK(kir_jit_key(&in, &key) == -1);
  CHECK(std::string(kir_last_error()).find("runtime-constant argument 2: read_memory(") != std::string::npos);
}

void test_jit_key_c_api() {
  kir_hash128 s = kir_static_hash("_Z4axpydPdi", "ir", nullptr, 0);
  kir::Hash128 cpp{s.high, s.low};
  // axpy(double a, double* coefficients, int n, Params p): a a runtime constant, the
  // array of n coefficients read by pointer, p (16 bytes) by value.
  double a = 2.5;
  std::vector<double> coefficients(1100);  // 8800 bytes: read in three pieces
  for (size_t i = 0; i < coefficients.size(); ++i) coefficients[i] = double(i) / 3;
  double* pointer = coefficients.data();
  int32_t n = 1100;
  struct { double x; int64_t y; } params{1.5, 7};
  void* args[] = {&a, &pointer, &n, &params};
  const uint32_t sizes[] = {8, 8, 4, 16};
  const kir_jit_arg jit_args[] = {  // any order
      {4, KIR_JIT_OBJECT, KIR_ARG_BYTES, 1, 0, 16, 0},
      {1, KIR_JIT_SCALAR, KIR_ARG_F64, 0, 0, 0, 0},
      {2, KIR_JIT_ARRAY, KIR_ARG_F64, 0, KIR_ARG_I32, 0, 3},
  };
  const kir_config_item config[] = {{"opt-level", "3", 1}};
  const kir_jit_capture captures[] = {{"L", 0, 8, KIR_ARG_I32, &n, 4}};
  int reads = 0;
  kir_jit_key_input in{};
  in.struct_size = sizeof in;
  in.static_hash = s;
  in.arch = "sm_90";
  in.args = args, in.param_sizes = sizes, in.param_count = 4;
  in.jit_args = jit_args, in.jit_arg_count = 3;
  in.grid[0] = 4, in.grid[1] = in.grid[2] = 1;
  in.block[0] = 256, in.block[1] = in.block[2] = 1;
  in.shared_bytes = 1024;
  in.specialize_block = 1;
  in.max_threads = 256, in.min_blocks = 2;
  in.config = config, in.config_count = 1;
  in.read_memory = read_host, in.user = &reads;
  in.captures = captures, in.capture_count = 1;

  kir_hash128 key{};
  long before = allocations.load();
  CHECK(kir_jit_key(&in, &key) == 0);
  CHECK(allocations.load() == before);  // allocation-free
  CHECK(reads == 3);

  kir::Hash128 expected = kir::DynamicHash(cpp, "sm_90")
                              .arg(1, kir::ArgType::f64, a)
                              .arg(2, kir::ArgType::f64, coefficients.data(), coefficients.size() * 8)
                              .arg(4, kir::ArgType::bytes, &params, 16)
                              .capture("L", 0, 8, kir::ArgType::i32, &n, 4)
                              .specialize(KIR_SPECIALIZE_BLOCK | KIR_SPECIALIZE_BOUNDS)
                              .block(256, 1, 1)
                              .bounds(256, 2)
                              .shared(1024)
                              .config("opt-level", "3")
                              .finish();
  CHECK(key.high == expected.high && key.low == expected.low);

  // From a per-kernel prefix: the same key, without re-encoding HEADER, STATIC, ARCH.
  kir_dynamic_hash prefix;
  kir_dynamic_hash_begin(&prefix, s, "sm_90");
  in.prefix = &prefix;
  in.arch = "ignored";
  kir_hash128 from_prefix{};
  before = allocations.load();
  CHECK(kir_jit_key(&in, &from_prefix) == 0);
  kir_dynamic_hash h;
  kir_dynamic_hash_extend(&h, &prefix);
  kir_dynamic_hash_shared(&h, 0);
  kir_hash128 extended = kir_dynamic_hash_finish(&h);
  CHECK(allocations.load() == before);
  CHECK(from_prefix.high == key.high && from_prefix.low == key.low);
  kir::Hash128 short_key = kir::DynamicHash(cpp, "sm_90").shared(0).finish();
  CHECK(extended.high == short_key.high && extended.low == short_key.low);
  in.prefix = nullptr;
  in.arch = "sm_90";

  // The CONFIG records encoded once (kir_jit_config_records): the same key, and
  // still allocation-free at the launch; both encodings at once is an error.
  const kir_config_item two[] = {{"opt-level", "3", 1}, {"kind", "cubin", 5}};
  size_t need = kir_jit_config_records(config, 1, nullptr, 0);
  CHECK(need == 9 + 9 + 1);
  std::string encoded(need, '\0');
  CHECK(kir_jit_config_records(config, 1, encoded.data(), encoded.size()) == need);
  in.config = nullptr, in.config_count = 0;
  in.config_records = encoded.data(), in.config_records_size = encoded.size();
  kir_hash128 from_records{};
  before = allocations.load();
  CHECK(kir_jit_key(&in, &from_records) == 0);
  CHECK(allocations.load() == before);
  CHECK(from_records.high == key.high && from_records.low == key.low);
  in.config = config, in.config_count = 1;
  CHECK(kir_jit_key(&in, &from_records) == -1);
  CHECK(std::string(kir_last_error()).find("config_records and config are both given") != std::string::npos);
  in.config_records = nullptr, in.config_records_size = 0;
  CHECK(kir_jit_config_records(two, 2, nullptr, 0) == 19 + 9 + 4 + 5);
  const kir_config_item bad[] = {{nullptr, "3", 1}};
  CHECK(kir_jit_config_records(bad, 1, nullptr, 0) == 0);
  CHECK(std::string(kir_last_error()).find("item #0: key is NULL") != std::string::npos);

  // A caller compiled before the appended fields: no captures, no prefix.
  kir_jit_key_input old = in;
  old.struct_size = offsetof(kir_jit_key_input, captures);
  kir_hash128 old_key{};
  CHECK(kir_jit_key(&old, &old_key) == 0);
  CHECK(!(old_key.high == key.high && old_key.low == key.low));
  old.struct_size = offsetof(kir_jit_key_input, user);
  CHECK(kir_jit_key(&old, &old_key) == -1);
  CHECK(std::string(kir_last_error()).find("struct_size") != std::string::npos);

  // Errors: no read_memory for an array passed by pointer; a failed read.
  in.read_memory = nullptr;
  CHECK(kir_jit_key(&in, &key) == -1);
  CHECK(std::string(kir_last_error()) ==
        "JIT key: runtime-constant argument 2: passed by pointer, and read_memory is NULL");
  in.read_memory = [](void*, uint64_t, void*, size_t) { return 5; };
  CHECK(kir_jit_key(&in, &key) == -1);
  CHECK(std::string(kir_last_error()).find("failed (5)") != std::string::npos);
  CHECK(kir_jit_key(nullptr, &key) == -1);

  // The launch identity from a kept prefix (the hook layer's per-kernel path) is the same.
  {
    const uint32_t g[3] = {4, 1, 1}, b[3] = {256, 1, 1};
    kir::DynamicHash start(kir::HashDomain::launch_identity, cpp, "sm_90");
    std::string prefix(start.encoded());
    CHECK(!prefix.empty());
    kir::Hash128 whole = kir::launch_identity(cpp, "sm_90", args, sizes, 4, g, b, 128);
    kir::Hash128 from = kir::launch_identity_from(prefix, args, sizes, 4, g, b, 128);
    CHECK(whole.high == from.high && whole.low == from.low);
  }

  // The launch identity: the C helper equals the builder.
  const uint32_t grid[3] = {4, 1, 1}, block[3] = {256, 1, 1};
  kir_hash128 identity = kir_launch_identity(s, "sm_90", args, sizes, 4, grid, block, 128);
  kir_launch_identity_begin(&h, s, "sm_90");
  for (uint32_t i = 0; i < 4; ++i) kir_dynamic_hash_arg(&h, i + 1, KIR_ARG_BYTES, args[i], sizes[i]);
  kir_dynamic_hash_grid(&h, 4, 1, 1);
  kir_dynamic_hash_block(&h, 256, 1, 1);
  kir_dynamic_hash_shared(&h, 128);
  kir_hash128 built = kir_dynamic_hash_finish(&h);
  CHECK(identity.high == built.high && identity.low == built.low);
  kir_hash128 other = kir_launch_identity(s, "sm_90", args, sizes, 4, grid, block, 0);
  CHECK(!(identity.high == other.high && identity.low == other.low));  // shared memory counts
}

void test_demangle() {
  CHECK(kir::demangle("_Z4axpyfPKfPfi") == "axpy(float, float const*, float*, int)");
  CHECK(kir::demangle("plain_c_name") == "plain_c_name");
  CHECK(kir::demangle("_Zbroken") == "_Zbroken");
}

void test_c_api_errors() {
  CHECK(kir_binary_open("/nonexistent/kir", 0) == nullptr);
  CHECK(std::string(kir_last_error()).find("cannot open") != std::string::npos);
  CHECK(kir_last_error_code() == KIR_ERROR_NOT_FOUND && kir_last_error_offset() == KIR_NO_OFFSET);
  CHECK(kir_binary_image_count(nullptr) == 0);
  kir_image_info info{};
  info.struct_size = sizeof info;
  CHECK(kir_binary_image_info(nullptr, 0, &info) == -1);
  CHECK(kir_last_error_code() == KIR_ERROR_INVALID_ARGUMENT);
  CHECK(kir_abi_version() == KIR_ABI_VERSION);
  CHECK(std::string(kir_version()) == "0.1.0");
}

}  // namespace

/// Every writer encoding boundary, read back by the reader.
void test_msgpack_writer() {
  kir::MsgpackWriter w;
  const uint64_t uints[] = {0, 127, 128, 255, 256, 65535, 65536, 0xffffffffull, 0x100000000ull, UINT64_MAX / 2};
  const int64_t sints[] = {-1, -32, -33, -128, -129, -32768, -32769, INT32_MIN, int64_t(INT32_MIN) - 1};
  std::string long_text(70000, 'x');
  w.map(4).key("u").array(10);
  for (uint64_t u : uints) w.uint(u);
  w.key("s").array(9);
  for (int64_t s : sints) w.sint(s);
  w.key("t").array(4).str("").str(std::string(31, 'a')).str(std::string(300, 'b')).str(long_text);
  w.key("b").array(3).bin("\1\2", 2).bin(long_text.data(), 300).nil();
  std::vector<uint8_t> bytes = w.take();
  kir::Expected<kir::MsgpackValue> v = kir::parse_msgpack(kir::ByteView(bytes.data(), bytes.size()));
  CHECK(v.ok());
  if (!v) return;
  const kir::MsgpackValue* u = v->get("u");
  CHECK(u && u->items.size() == 10);
  for (size_t i = 0; u && i < 10; ++i) CHECK(uint64_t(u->items[i].integer) == uints[i]);
  const kir::MsgpackValue* s = v->get("s");
  CHECK(s && s->items.size() == 9);
  for (size_t i = 0; s && i < 9; ++i) CHECK(s->items[i].integer == sints[i]);
  const kir::MsgpackValue* t = v->get("t");
  CHECK(t && t->items.size() == 4 && t->items[3].string == long_text && t->items[2].string.size() == 300);
  const kir::MsgpackValue* b = v->get("b");
  CHECK(b && b->items[0].type == kir::MsgpackValue::Type::binary && b->items[0].string == "\1\2");
  CHECK(b && b->items[1].string.size() == 300 && b->items[2].type == kir::MsgpackValue::Type::nil);
}

/// The record metadata's MapWriter: keys from the field table, the entry count from
/// what was written (fixmap, then map16 past 15 entries), and a writer bug (a field
/// out of order, left out, of another type or out of bounds) an Error, nested ones
/// reaching the outer map.
void test_metadata_writer() {
  namespace m = kir::record::metadata;
  kir::MsgpackWriter w;
  m::MapWriter p(w, m::process::table);
  p.sint(m::process::pid, 7);
  p.sint(m::process::rank, -1);
  CHECK(bool(p.end()));
  const std::vector<uint8_t> two = {0x82, 0xa3, 'p', 'i', 'd', 0x07, 0xa4, 'r', 'a', 'n', 'k', 0xff};
  CHECK(w.bytes() == two);

  kir::MsgpackWriter many;
  for (int i = 0; i < 16; ++i) many.key("k").uint(uint64_t(i));
  many.insert_map(0, 16);
  CHECK(many.bytes()[0] == 0xde && many.bytes()[1] == 0 && many.bytes()[2] == 16);
  kir::Expected<kir::MsgpackValue> parsed = kir::parse_msgpack(kir::ByteView(many.bytes().data(), many.size()));
  CHECK(parsed.ok() && parsed->items.size() == 32);

  auto error = [](kir::Status s) { return s ? std::string() : s.error().message(); };
  kir::MsgpackWriter bad;
  m::MapWriter twice(bad, m::process::table);
  twice.sint(m::process::pid, 0);
  twice.sint(m::process::rank, 0);
  twice.sint(m::process::pid, 0);
  CHECK(error(twice.end()) == "metadata process.pid: not a field of this map, or written out of order");
  m::MapWriter swapped(bad, m::process::table);
  swapped.sint(m::process::rank, 0);  // past pid: left out
  CHECK(error(swapped.end()) == "metadata process.pid: left out");
  m::MapWriter short_(bad, m::process::table);
  short_.sint(m::process::pid, 0);
  CHECK(error(short_.end()) == "metadata process.rank: left out");
  m::MapWriter typed(bad, m::param::table);
  typed.sint(m::param::offset, 0);
  CHECK(error(typed.end()) == "metadata param.offset: a uint field written as sint");
  m::MapWriter outer(bad, m::kernel::table);
  outer.list(m::kernel::params, 1);  // name, demangled, static_hash left out first
  m::MapWriter param = outer.item(m::kernel::params);
  param.uint(m::param::offset, 70000);
  param.uint(m::param::size, 8);
  CHECK(error(param.end()) == "metadata param.offset: 70000 is not from 0 to 65536");
  CHECK(error(outer.end()) == "metadata kernel.name: left out");  // its own first error
}

/// A zstd round trip through the writer's compressor and the reader's decoder.
void test_zstd_compress() {
  std::vector<uint8_t> raw(100000);
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = uint8_t(i % 7);
  std::vector<uint8_t> packed = {0xaa};
  kir::Expected<uint64_t> n = kir::compress_zstd(kir::ByteView(raw.data(), raw.size()), 1, packed, 1);
  CHECK(n.ok() && packed.size() == 1 + *n && packed[0] == 0xaa && *n < raw.size() / 10);
  kir::Scratch scratch;
  kir::Expected<kir::ByteView> back = kir::decompress_zstd(kir::ByteView(packed.data() + 1, *n), raw.size(), scratch);
  CHECK(back.ok() && back->size() == raw.size() && std::memcmp(back->data(), raw.data(), raw.size()) == 0);
}

/// Every member of every model enum round-trips name -> enum -> name, names
/// are unique, and names outside the table (and out-of-range values) are refused.
template <class Enum>
void check_round_trip(unsigned count, std::optional<Enum> (*from_name)(std::string_view)) {
  std::vector<std::string> seen;
  for (unsigned i = 0; i < count; ++i) {
    const char* n = kir::name(static_cast<Enum>(i));
    CHECK(n && *n);
    std::optional<Enum> back = from_name(n);
    CHECK(back && static_cast<unsigned>(*back) == i);
    CHECK(std::find(seen.begin(), seen.end(), n) == seen.end());
    seen.push_back(n);
  }
  CHECK(!from_name("no-such-kind") && !from_name("") && !from_name("unknown-5"));
  CHECK(std::string(kir::name(static_cast<Enum>(count))) == kir::name(static_cast<Enum>(0)));
}

void test_model_names() {
  check_round_trip<kir::ImageKind>(kir::kImageKinds, kir::image_kind_from_name);
  check_round_trip<kir::CodeKind>(kir::kCodeKinds, kir::code_kind_from_name);
  check_round_trip<kir::TargetKind>(kir::kTargetKinds, kir::target_kind_from_name);
  check_round_trip<kir::AllocationKind>(kir::kAllocationKinds, kir::allocation_kind_from_name);
  // The JSON names of docs/json-schema.md, and the raw fatbin kinds they come from.
  CHECK(std::string(kir::name(kir::ImageKind::code_object)) == "code-object");
  CHECK(std::string(kir::name(kir::ImageKind::lto_ir)) == "lto-ir");
  CHECK(kir::fatbin_image_kind(1) == kir::ImageKind::ptx && kir::fatbin_image_kind(2) == kir::ImageKind::cubin);
  CHECK(kir::fatbin_image_kind(4) == kir::ImageKind::old_cubin && kir::fatbin_image_kind(8) == kir::ImageKind::lto_ir);
  CHECK(kir::fatbin_image_kind(3) == kir::ImageKind::unknown && kir::fatbin_image_kind(0) == kir::ImageKind::unknown);
  CHECK(kir::target_kind_of("sm_90") == kir::TargetKind::cuda && kir::target_kind_of("gfx90a:xnack+") == kir::TargetKind::amdgpu);
  CHECK(kir::target_kind_of("") == kir::TargetKind::none);
  CHECK(kir::code_kind_of(kir::ImageKind::code_object) == kir::CodeKind::code_object);
  CHECK(kir::code_kind_of(kir::ImageKind::bitcode) == kir::CodeKind::unknown);
}

/// A plain offload bundle: magic, count, {offset, size, id length, id} per entry, data.
Bytes bundle(const std::vector<std::pair<std::string, Bytes>>& entries) {
  Bytes b(kir::kOffloadBundleMagic.begin(), kir::kOffloadBundleMagic.end());
  put<uint64_t>(b, b.size(), entries.size());
  uint64_t table = b.size();
  for (const auto& e : entries) table += 24 + e.first.size();
  uint64_t data = table;
  for (const auto& [id, bytes] : entries) {
    put<uint64_t>(b, b.size(), data);
    put<uint64_t>(b, b.size(), bytes.size());
    put<uint64_t>(b, b.size(), id.size());
    b.insert(b.end(), id.begin(), id.end());
    data += bytes.size();
  }
  for (const auto& e : entries) b.insert(b.end(), e.second.begin(), e.second.end());
  return b;
}

/// A `__fatBinC_Wrapper_t` (or HIP's) pointing at `data`.
Bytes wrapper(uint32_t magic, const void* data) {
  Bytes w(24, 0);
  put<uint32_t>(w, 0, magic);
  put<uint32_t>(w, 4, 1);
  put<uint64_t>(w, 8, reinterpret_cast<uintptr_t>(data));
  return w;
}

/// The from-memory discoverers see what the file discoverers see, sized from
/// the headers alone (the memory after the container is never part of it).
void test_discover_from_memory() {
  Bytes ptx = {'.', 'v', 'e', 'r', 's', 'i', 'o', 'n', ' ', '8', '\0'};
  Bytes c = container({entry(1, 90, ptx), entry(2, 80, Bytes(24, 0xAB))});
  Bytes memory = c;
  memory.resize(c.size() + 100, 0xEE);  // whatever follows in the app's memory
  Bytes w = wrapper(kir::kFatbinWrapperMagic, memory.data());
  kir::Expected<kir::ContainerSite> site = kir::discover_registered_fatbin(w.data());
  kir::Expected<kir::ContainerSite> file = kir::discover_fatbin(view(c));
  CHECK(site.ok() && file.ok());
  if (site && file) {
    CHECK(site->size == c.size() && site->found_by == kir::FoundBy::wrapper);
    CHECK(site->format == kir::ContainerFormat::cuda_fatbin && site->images.size() == 2);
    for (size_t i = 0; i < 2 && i < site->images.size(); ++i) {
      const kir::Image &m = site->images[i], &f = file->images[i];
      CHECK(m.kind == f.kind && m.target == f.target && m.size == f.size && m.file_offset == f.file_offset);
    }
    CHECK(site->images[0].kind == kir::ImageKind::ptx && site->images[1].target == "sm_80");
  }
  kir::Expected<kir::FatbinContainer> fc = kir::registered_fatbin(w.data());
  CHECK(fc.ok() && fc->total_size() == c.size() && fc->entries().size() == 2);
  // A wrong magic or a NULL container: precise errors.
  Bytes bad = wrapper(kir::kHipWrapperMagic, memory.data());
  kir::Expected<kir::ContainerSite> wrong = kir::discover_registered_fatbin(bad.data());
  CHECK(!wrong);
  auto at = [](const void* p) { return kir::hex(reinterpret_cast<uintptr_t>(p)); };
  if (!wrong)
    CHECK_ERROR("wrapper at " + at(bad.data()) + ": expected magic 0x466243b1, found 0x48495046",
                wrong.error().message());
  Bytes null = wrapper(kir::kFatbinWrapperMagic, nullptr);
  kir::Expected<kir::ContainerSite> none = kir::discover_registered_fatbin(null.data());
  CHECK(!none);
  if (!none) CHECK_ERROR("wrapper at " + at(null.data()) + ": its container pointer is NULL", none.error().message());
  // Bounded: a container claiming more than the memory allowed is refused.
  CHECK(!kir::discover_registered_fatbin(w.data(), c.size() - 1).ok());

  // HIP: {"HIPF", 1, bundle}; the host entry is kept, and typed.
  Bytes code_object = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0x40};
  code_object.resize(64, 0);
  put<uint16_t>(code_object, 18, 224);  // EM_AMDGPU
  Bytes b = bundle({{"host-x86_64-unknown-linux-gnu-", {}}, {"hipv4-amdgcn-amd-amdhsa--gfx90a", code_object}});
  Bytes bmem = b;
  bmem.resize(b.size() + 64, 0xEE);
  Bytes hw = wrapper(kir::kHipWrapperMagic, bmem.data());
  kir::Expected<kir::ContainerSite> hb = kir::discover_registered_bundle(hw.data());
  CHECK(hb.ok());
  if (hb) {
    CHECK(hb->size == b.size() && hb->format == kir::ContainerFormat::offload_bundle);
    CHECK(hb->images.size() == 2 && hb->images[0].kind == kir::ImageKind::host);
    CHECK(hb->images[1].kind == kir::ImageKind::code_object && hb->images[1].target == "gfx90a");
    CHECK(hb->images[1].stored.data() == bmem.data() + (b.size() - code_object.size()));
  }
  // A version 1 CCOB does not say how long it is: refused from memory.
  Bytes ccob = {'C', 'C', 'O', 'B', 1, 0, 1, 0};
  ccob.resize(40, 0);
  Bytes cw = wrapper(kir::kHipWrapperMagic, ccob.data());
  kir::Expected<kir::ContainerSite> v1 = kir::discover_registered_bundle(cw.data());
  CHECK(!v1);
  if (!v1)
    CHECK_ERROR("bundle at " + at(ccob.data()) +
                    ": compressed bundle version 1 does not record its size: it cannot be read from memory",
                v1.error().message());

  // Bare images handed to cuModuleLoadData: a fatbin, PTX text (with its NUL).
  kir::Expected<kir::ContainerSite> bare = kir::sized_device_image(memory.data());
  CHECK(bare.ok() && bare->size == c.size() && bare->images.size() == 2);
  const char text[] = ".version 8.0\n.target sm_90\n";
  kir::Expected<kir::ContainerSite> p = kir::sized_device_image(text);
  CHECK(p.ok() && p->size == sizeof text && p->images.size() == 1 &&
        p->images[0].kind == kir::ImageKind::ptx);
  const char unterminated[4] = {'a', 'b', 'c', 'd'};
  CHECK(!kir::sized_device_image(unterminated, sizeof unterminated).ok());
  CHECK(!kir::sized_device_image(nullptr).ok());
}

/// The one magic scan finds every occurrence of several magics in order,
/// including one straddling the end of the range, and skips what `at` says.
void test_magic_scan() {
  std::string text = "xxABxxCDxAByyyAB";
  kir::ByteView d(reinterpret_cast<const uint8_t*>(text.data()), text.size());
  std::vector<uint64_t> hits;
  uint64_t next = kir::discover::find_magic(d, 0, 10, {"AB", "CD"}, [&](uint64_t off) {
    hits.push_back(off);
    return off == 6 ? 4 : 0;  // "CD" at 6 is a container of 4 bytes: skips "AB" at 9
  });
  CHECK((hits == std::vector<uint64_t>{2, 6}) && next == 10);
  hits.clear();
  next = kir::discover::find_magic(d, 0, 10, {"AB"}, [&](uint64_t off) { return hits.push_back(off), 0; });
  CHECK((hits == std::vector<uint64_t>{2, 9}) && next == 10);  // "AB" at 9 straddles 10
  hits.clear();
  next = kir::discover::find_magic(d, 10, 16, {"AB"}, [&](uint64_t off) { return hits.push_back(off), 100; });
  CHECK((hits == std::vector<uint64_t>{14}) && next == 114);
}

int main() {
  const std::pair<const char*, std::function<void()>> tests[] = {
      {"byte_view_bounds", test_byte_view_bounds}, {"fatbin_roundtrip", test_fatbin_roundtrip},
      {"fatbin_errors", test_fatbin_errors},       {"compression", test_compression},
      {"elf_errors", test_elf_errors},             {"archive", test_archive},
      {"ptx", test_ptx},                           {"demangle", test_demangle},
      {"md5", test_md5},                           {"bundle_ids", test_bundle_ids},
      {"msgpack", test_msgpack},                   {"hash_c_api", test_hash_c_api_matches_cpp},
      {"msgpack_measure", test_msgpack_measure},
      {"jit_key_c_api", test_jit_key_c_api},       {"jit_key_values", test_jit_key_values},
      {"c_api_errors", test_c_api_errors},         {"msgpack_writer", test_msgpack_writer}, {"metadata_writer", test_metadata_writer},
      {"zstd_compress", test_zstd_compress},     {"model_names", test_model_names},
      {"discover_from_memory", test_discover_from_memory}, {"magic_scan", test_magic_scan}};
  for (const auto& [name, fn] : tests) {
    int before = failures;
    fn();
    std::printf("%s %s\n", failures == before ? "PASS" : "FAIL", name);
  }
  std::printf("%d checks, %d failed\n", checks, failures);
  return failures == 0 ? 0 : 1;
}
