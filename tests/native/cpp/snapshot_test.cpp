// The recorder's device-to-record copy (libkir/recorder/snapshot.cpp) without a
// GPU: a RecorderDriver whose "device" is host memory (its copies are memcpy, from a
// thread of their own when asynchronous, as a stream runs apart from the host),
// so tests/record/test_record_snapshot_cpu.py can check the pipeline itself — staging
// buffers reused while writer threads store the previous batch's chunks — against
// bytes it computes again, and its failures.
//
//   kir_snapshot_test DIR THREADS STAGING_CHUNKS CHUNK [FAIL]
//
// Records one launch with three regions (chunks of CHUNK bytes, staging of
// STAGING_CHUNKS chunks): 0, 73 chunks and 1 byte (many batches, a short last
// chunk); 1, one chunk; 2, empty. Byte i of region r is (i * (2r + 3) + r + (i >> 8) +
// 7 * (i >> 20)) & 0xff before the launch and that + 1 after. FAIL: "copy-N" makes the N-th device
// copy fail (copy() must return its error, nothing hangs, no record is written);
// "store" replaces the chunk directory by a file (the first store failure is
// returned). Prints "written PATH" or "failed: MESSAGE" (exit 0 both).
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "../../libkir/recorder/snapshot.hpp"
#include "kir/record/chunk_store.hpp"
#include "kir/record/record_builder.hpp"

using namespace kir;
using namespace kir::record;

namespace {

std::atomic<int> copies{0};
int fail_copy = -1;  // the copy (1-based) that fails
std::thread in_flight;  // the stream's one outstanding copy

/// The recorder's device API (libkir/recorder/driver.hpp) on host memory: what the
/// Snapshotter's copy() calls; the rest is refused (1), unused here.
class HostDriver final : public RecorderDriver {
 public:
  const char* runtime() const override { return "host"; }
  std::string error_name(int r) const override {
    return std::string(r == 700 ? "CUDA_ERROR_ILLEGAL_ADDRESS" : "CUDA_ERROR_UNKNOWN") + " (" + std::to_string(r) + ")";
  }
  int ensure_context(std::string*) const override { return 0; }
  void describe(int, std::string& name, std::string& arch) const override { name = "no device", arch = "sm_90"; }
  uintptr_t current() const override { return 0; }
  void make_current(uintptr_t) const override {}
  int synchronize() const override { return stream_synchronize(nullptr); }
  int stream_create(void** s) const override {
    *s = reinterpret_cast<void*>(0x1);
    return 0;
  }
  int stream_synchronize(void*) const override {
    if (in_flight.joinable()) in_flight.join();
    return 0;
  }
  int host_alloc(void** p, size_t n) const override {
    *p = std::malloc(n);
    return *p ? 0 : 2;
  }
  int alloc(uint64_t*, size_t) const override { return 1; }  // no scratch: copy() straight to the host
  int free(uint64_t) const override { return 1; }
  int copy_to_host(void* to, uint64_t from, size_t n) const override {
    std::memcpy(to, reinterpret_cast<const void*>(from), n);
    return 0;
  }
  int copy_to_host_async(void* to, uint64_t from, size_t n, void*) const override {
    if (++copies == fail_copy) return 700;  // CUDA_ERROR_ILLEGAL_ADDRESS
    // The copy runs while the caller goes on (its writers store earlier batches) and
    // lands at once: a pipeline that refilled a staging buffer before every chunk
    // taken from it was stored would store the next batch's bytes under the
    // earlier chunk's place, which the test sees in the record.
    in_flight = std::thread([=] { std::memcpy(to, reinterpret_cast<const void*>(from), n); });
    return 0;
  }
  int copy_on_device_async(uint64_t, uint64_t, size_t, void*) const override { return 1; }
  int memory_type(uint64_t, MemoryType& type) const override {
    type = kUnknownMemory;
    return 1;
  }
  int granularity(int, size_t*) const override { return 1; }
  const char* reserve_call() const override { return "reserve"; }
  int reserve(uint64_t*, size_t, size_t, uint64_t) const override { return 1; }
  int address_free(uint64_t, size_t) const override { return 1; }
  int create(uint64_t*, size_t, int) const override { return 1; }
  int release(uint64_t) const override { return 1; }
  int map(uint64_t, size_t, uint64_t) const override { return 1; }
  int unmap(uint64_t, size_t) const override { return 1; }
  int set_access(uint64_t, size_t, int) const override { return 1; }
};

std::vector<uint8_t> contents(size_t region, size_t size, bool after) {
  std::vector<uint8_t> bytes(size);
  for (size_t i = 0; i < size; ++i)  // no two chunks alike, at any chunk size a test uses
    bytes[i] = uint8_t(i * (2 * region + 3) + region + (after ? 1 : 0) + (i >> 8) + (i >> 20) * 7);
  return bytes;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: kir_snapshot_test DIR THREADS STAGING_CHUNKS CHUNK [copy-N|store]\n");
    return 2;
  }
  std::string mode = argc > 5 ? argv[5] : "";
  if (mode.rfind("copy-", 0) == 0) fail_copy = std::atoi(mode.c_str() + 5);
  HostDriver driver;

  Expected<std::unique_ptr<ChunkStore>> store = ChunkStore::open(argv[1], 1);
  if (!store) {
    std::fprintf(stderr, "%s\n", store.error().message().c_str());
    return 2;
  }
  const uint64_t chunk = std::strtoull(argv[4], nullptr, 10);
  RecordBuilder b(**store, chunk);
  b.set_process(1, -1);
  b.set_device("no device", "sm_90", 0);
  b.set_kernel("snapshot", "snapshot", Hash128{9, 1}, {0}, {8});
  b.set_launch("cuLaunchKernel", Hash128{9, 2}, {1, 1, 1}, {32, 1, 1}, 0, 0, {std::vector<uint8_t>(8)}, 0);
  const size_t sizes[] = {73 * chunk + 1, chunk, 0};
  std::vector<std::vector<uint8_t>> before, after;
  std::vector<size_t> regions;
  for (size_t r = 0; r < 3; ++r) {
    before.push_back(contents(r, sizes[r], false));
    after.push_back(contents(r, sizes[r], true));
    regions.push_back(b.add_allocation(0x100000 * (r + 1), sizes[r], "device", true));
  }
  if (mode == "store") {  // the chunk directory replaced by a file: every chunk's write fails (even as root)
    std::filesystem::remove_all(std::string(argv[1]) + "/chunks");
    std::FILE* f = std::fopen((std::string(argv[1]) + "/chunks").c_str(), "w");
    if (f) std::fclose(f);
  }
  Snapshotter snapshotter(driver, std::strtoull(argv[3], nullptr, 10) * chunk, unsigned(std::atoi(argv[2])));
  auto start = std::chrono::steady_clock::now();
  for (bool epilogue : {false, true}) {
    std::vector<uint64_t> sources;
    for (size_t r = 0; r < 3; ++r)
      sources.push_back(reinterpret_cast<uint64_t>((epilogue ? after : before)[r].data()));
    if (Status s = snapshotter.copy(b, regions, epilogue, &sources); !s) {
      std::printf("failed: %s\n", s.error().message().c_str());
      return 0;
    }
  }
  auto stored = std::chrono::steady_clock::now();
  Expected<std::string> path = b.write();  // syncs the chunks (syncfs) before the record names them
  auto written = std::chrono::steady_clock::now();
  std::fprintf(stderr, "store %.3f s, write (sync included) %.3f s\n",
               std::chrono::duration<double>(stored - start).count(),
               std::chrono::duration<double>(written - stored).count());
  if (!path) {
    std::printf("failed: %s\n", path.error().message().c_str());
    return 0;
  }
  std::printf("written %s\n", path->c_str());
  return 0;
}
