// The recorder's device-to-record copy (snapshot.hpp).
#include "snapshot.hpp"

#include <algorithm>

namespace kir::record {

Status Snapshotter::prepare() {
  if (stream_) return {};
  for (uint8_t*& buffer : staging_) {
    void* p = nullptr;
    if (CUresult r = driver_.cuMemHostAlloc(&p, staging_bytes_, 0); r != 0)
      return Error("cannot allocate " + hex(staging_bytes_) + " bytes of pinned staging memory: " +
                   driver_.error_name(r));
    buffer = static_cast<uint8_t*>(p);
  }
  if (CUresult r = driver_.cuStreamCreate(&stream_, 1 /* CU_STREAM_NON_BLOCKING */); r != 0)
    return Error("cannot create the recorder's stream: " + driver_.error_name(r));
  return {};
}

Status Snapshotter::copy(RecordBuilder& builder, const std::vector<size_t>& regions, bool epilogue) {
  if (Status ready = prepare(); !ready) return ready;
  struct Batch {
    size_t region;
    uint64_t offset, size;
    int buffer;
  };
  // Batches never straddle a chunk boundary of their region: staging holds
  // whole chunks except for each region's last.
  std::vector<Batch> batches;
  for (size_t region : regions) {
    const Region& r = builder.regions()[region];
    for (uint64_t at = 0; at < r.size; at += staging_bytes_)
      batches.push_back({region, at, std::min(staging_bytes_, r.size - at), int(batches.size() % 2)});
    if (r.size == 0) batches.push_back({region, 0, 0, int(batches.size() % 2)});
  }
  auto store = [&](const Batch& b) {
    return builder.snapshot(b.region, epilogue, b.offset, ByteView(staging_[b.buffer], b.size), threads_);
  };
  for (size_t i = 0; i < batches.size(); ++i) {
    const Batch& b = batches[i];
    const Region& r = builder.regions()[b.region];
    CUresult issued = b.size ? driver_.cuMemcpyDtoHAsync(staging_[b.buffer], r.address + b.offset, b.size, stream_) : 0;
    Status stored = i ? store(batches[i - 1]) : Status();  // the previous batch, while this one copies
    CUresult done = driver_.cuStreamSynchronize(stream_);
    if (issued != 0 || done != 0)
      return Error("copying " + hex(b.size) + " bytes at " + hex(r.address + b.offset) + " to the host failed: " +
                   driver_.error_name(issued ? issued : done));
    if (!stored) return stored;
  }
  return batches.empty() ? Status() : store(batches.back());
}

Expected<std::vector<uint8_t>> Snapshotter::read(uint64_t address, uint64_t size) {
  std::vector<uint8_t> out(size);
  if (size == 0) return out;
  if (CUresult r = driver_.cuMemcpyDtoH(out.data(), address, size); r != 0)
    return Error("copying " + hex(size) + " bytes at " + hex(address) + " to the host failed: " + driver_.error_name(r));
  return out;
}

}  // namespace kir::record
