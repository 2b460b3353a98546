// The recorder's device-to-record copy (snapshot.hpp).
#include "snapshot.hpp"

#include <algorithm>
#include <chrono>

namespace kir::record {

Status Snapshotter::prepare_stream() {
  if (stream_) return {};
  if (CUresult r = driver_.cuStreamCreate(&stream_, 1 /* CU_STREAM_NON_BLOCKING */); r != 0)
    return Error("cannot create the recorder's stream: " + driver_.error_name(r));
  return {};
}

Status Snapshotter::prepare() {
  if (Status s = prepare_stream(); !s) return s;
  for (uint8_t*& buffer : staging_) {
    if (buffer) continue;
    void* p = nullptr;
    if (CUresult r = driver_.cuMemHostAlloc(&p, staging_bytes_, 0); r != 0)
      return Error("cannot allocate " + hex(staging_bytes_) + " bytes of pinned staging memory: " +
                   driver_.error_name(r));
    buffer = static_cast<uint8_t*>(p);
  }
  return {};
}

Status Snapshotter::copy(RecordBuilder& builder, const std::vector<size_t>& regions, bool epilogue,
                         const std::vector<uint64_t>* sources) {
  if (Status ready = prepare(); !ready) return ready;
  struct Batch {
    size_t region;
    uint64_t offset, size, from;  // from: the device address it is copied from
    int buffer;
  };
  // Batches never straddle a chunk boundary of their region: staging holds
  // whole chunks except for each region's last. An empty region is stored at once.
  std::vector<Batch> batches;
  for (size_t i = 0; i < regions.size(); ++i) {
    const Region& r = builder.regions()[regions[i]];
    if (r.size == 0) {
      if (Status s = builder.snapshot(regions[i], epilogue, 0, ByteView()); !s) return s;
      continue;
    }
    uint64_t source = sources ? (*sources)[i] : r.address;
    for (uint64_t at = 0; at < r.size; at += staging_bytes_)
      batches.push_back({regions[i], at, std::min(staging_bytes_, r.size - at), source + at, int(batches.size() % 2)});
  }
  auto store = [&](const Batch& b) {
    return builder.snapshot(b.region, epilogue, b.offset, ByteView(staging_[b.buffer], b.size), threads_);
  };
  for (size_t i = 0; i < batches.size(); ++i) {
    const Batch& b = batches[i];
    CUresult issued = driver_.cuMemcpyDtoHAsync(staging_[b.buffer], b.from, b.size, stream_);
    Status stored = i ? store(batches[i - 1]) : Status();  // the previous batch, while this one copies
    auto wait_start = std::chrono::steady_clock::now();
    CUresult done = driver_.cuStreamSynchronize(stream_);
    builder.add_copy_wait(std::chrono::duration<double>(std::chrono::steady_clock::now() - wait_start).count());
    if (issued != 0 || done != 0)
      return Error("copying " + hex(b.size) + " bytes at " + hex(builder.regions()[b.region].address + b.offset) +
                   " to the host failed: " +
                   driver_.error_name(issued ? issued : done));
    if (!stored) return stored;
  }
  return batches.empty() ? Status() : store(batches.back());
}

std::optional<Snapshotter::DeviceCopy> Snapshotter::copy_on_device(const RecordBuilder& builder,
                                                                  const std::vector<size_t>& regions) {
  if (!prepare_stream()) return std::nullopt;  // the staging buffers wait for the writer thread
  DeviceCopy copied;
  uint64_t total = 0;
  for (size_t region : regions) {
    copied.sources.push_back(total);
    total += (builder.regions()[region].size + 255) / 256 * 256;
  }
  if (total == 0 || driver_.cuMemAlloc(&copied.scratch, total) != 0) return std::nullopt;
  bool ok = true;
  for (size_t i = 0; i < regions.size() && ok; ++i) {
    const Region& r = builder.regions()[regions[i]];
    copied.sources[i] += copied.scratch;
    if (r.size) ok = driver_.cuMemcpyDtoDAsync(copied.sources[i], r.address, r.size, stream_) == 0;
  }
  ok = driver_.cuStreamSynchronize(stream_) == 0 && ok;
  if (!ok) {
    driver_.cuMemFree(copied.scratch);
    return std::nullopt;
  }
  return copied;
}

Status Snapshotter::store(RecordBuilder& builder, const std::vector<size_t>& regions, bool epilogue,
                          DeviceCopy& copied) {
  Status stored = copy(builder, regions, epilogue, &copied.sources);
  driver_.cuMemFree(copied.scratch);
  copied.scratch = 0;
  return stored;
}

Expected<std::vector<uint8_t>> Snapshotter::read(uint64_t address, uint64_t size) {
  std::vector<uint8_t> out(size);
  if (size == 0) return out;
  if (CUresult r = driver_.cuMemcpyDtoH(out.data(), address, size); r != 0)
    return Error("copying " + hex(size) + " bytes at " + hex(address) + " to the host failed: " + driver_.error_name(r));
  return out;
}

}  // namespace kir::record
