// The recorder's device-to-record copy (snapshot.hpp).
#include "snapshot.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>

namespace kir::record {

namespace {

/// The writer threads of one copy(): they store chunks (hash, compress, write)
/// from both staging buffers as they arrive, so a thread that finished its part
/// of one batch goes on with the next batch's chunks instead of waiting at a
/// barrier for the slowest (issue 15). A buffer is free again once every chunk
/// taken from it is stored.
class ChunkWriters {
 public:
  ChunkWriters(RecordBuilder& builder, bool epilogue, unsigned threads)
      : builder_(builder), epilogue_(epilogue), threads_(std::max(1u, threads)) {}
  ~ChunkWriters() { stop(); }

  /// Queue the chunks of `bytes` (staging `buffer`), region `region`'s from `offset` on.
  void add(int buffer, size_t region, uint64_t offset, ByteView bytes) {
    const uint64_t chunk = builder_.chunk_size();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (uint64_t at = 0; at < bytes.size(); at += chunk) {
        tasks_.push_back({buffer, region, (offset + at) / chunk, bytes.sub(at, std::min(chunk, bytes.size() - at))});
        ++pending_[buffer];
        ++queued_;
      }
    }
    while (!refused_ && pool_.size() < threads_ && pool_.size() < queued_) {
      try {
        pool_.emplace_back([this] { work(); });
      } catch (const std::system_error&) {  // a thread limit: go on with the threads there are
        refused_ = true;
        builder_.count_refused_thread();
      }
    }
    ready_.notify_all();
    if (pool_.empty()) work(false);  // not one thread: store the chunks here
  }

  /// Wait until every chunk queued from `buffer` is stored (or a store failed).
  void wait_free(int buffer) {
    std::unique_lock<std::mutex> lock(mutex_);
    stored_.wait(lock, [&] { return pending_[buffer] == 0; });
  }

  bool failed() {
    std::lock_guard<std::mutex> lock(mutex_);
    return !failure_;
  }

  /// Wait for every queued chunk and stop the threads.
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_all();
    for (std::thread& t : pool_) t.join();
    pool_.clear();
  }

  /// stop(), then the first failure, if any.
  Status finish() {
    stop();
    return failure_;
  }

 private:
  struct Task {
    int buffer;
    size_t region;
    uint64_t index;
    ByteView bytes;
  };

  /// Store queued chunks: as a pool thread until stop(), or (`wait` false) on
  /// the caller's thread until none is left.
  void work(bool wait = true) {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      if (wait) ready_.wait(lock, [&] { return !tasks_.empty() || stopping_; });
      if (tasks_.empty()) return;  // stopping (or done here), nothing left
      Task t = tasks_.front();
      tasks_.pop_front();
      bool skip = !failure_;  // after a failure the record is not written: drain the rest
      lock.unlock();
      Status stored = skip ? Status{} : builder_.snapshot_chunk(t.region, epilogue_, t.index, t.bytes);
      lock.lock();
      if (!stored && failure_) failure_ = stored;
      --pending_[t.buffer];
      stored_.notify_all();
    }
  }

  RecordBuilder& builder_;
  const bool epilogue_;
  const size_t threads_;
  std::mutex mutex_;
  std::condition_variable ready_, stored_;
  std::deque<Task> tasks_;
  size_t pending_[2] = {0, 0};
  size_t queued_ = 0;
  bool stopping_ = false;
  bool refused_ = false;  // a thread start failed: no more tries
  Status failure_;
  std::vector<std::thread> pool_;  // started as chunks arrive, up to threads_
};

}  // namespace

Status Snapshotter::prepare_stream() {
  if (stream_) return {};
  if (int r = driver_.stream_create(&stream_); r != 0)
    return Error(ErrorCode::internal, "cannot create the recorder's stream: " + driver_.error_name(r));
  return {};
}

Status Snapshotter::prepare() {
  if (Status s = prepare_stream(); !s) return s;
  for (uint8_t*& buffer : staging_) {
    if (buffer) continue;
    void* p = nullptr;
    if (int r = driver_.host_alloc(&p, staging_bytes_); r != 0)
      return Error(ErrorCode::internal, "cannot allocate " + hex(staging_bytes_) +
                                            " bytes of pinned staging memory: " + driver_.error_name(r));
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
  // Each batch is copied into the buffer its batch-before-last used, once every
  // chunk of that one is stored; its chunks join the writers' queue behind the
  // previous batch's, which they store meanwhile.
  ChunkWriters writers(builder, epilogue, threads_);
  for (const Batch& b : batches) {
    writers.wait_free(b.buffer);
    if (writers.failed()) break;  // finish() says why
    int issued = driver_.copy_to_host_async(staging_[b.buffer], b.from, b.size, stream_);
    auto wait_start = std::chrono::steady_clock::now();
    int done = driver_.stream_synchronize(stream_);
    builder.add_copy_wait(std::chrono::duration<double>(std::chrono::steady_clock::now() - wait_start).count());
    if (issued != 0 || done != 0) {
      writers.stop();  // the chunks already queued are stored; the record is not written
      return Error(ErrorCode::internal, "copying " + hex(b.size) + " bytes at " +
                                            hex(builder.regions()[b.region].address + b.offset) +
                                            " to the host failed: " + driver_.error_name(issued ? issued : done));
    }
    if (Status begun = builder.begin_snapshot(b.region, epilogue, b.offset, b.size); !begun) {
      writers.stop();
      return begun;
    }
    writers.add(b.buffer, b.region, b.offset, ByteView(staging_[b.buffer], b.size));
  }
  return writers.finish();
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
  if (total == 0 || driver_.alloc(&copied.scratch, total) != 0) return std::nullopt;
  bool ok = true;
  for (size_t i = 0; i < regions.size() && ok; ++i) {
    const Region& r = builder.regions()[regions[i]];
    copied.sources[i] += copied.scratch;
    if (r.size) ok = driver_.copy_on_device_async(copied.sources[i], r.address, r.size, stream_) == 0;
  }
  ok = driver_.stream_synchronize(stream_) == 0 && ok;
  if (!ok) {
    driver_.free(copied.scratch);
    return std::nullopt;
  }
  return copied;
}

Status Snapshotter::store(RecordBuilder& builder, const std::vector<size_t>& regions, bool epilogue,
                          DeviceCopy& copied) {
  Status stored = copy(builder, regions, epilogue, &copied.sources);
  driver_.free(copied.scratch);
  copied.scratch = 0;
  return stored;
}

Expected<std::vector<uint8_t>> Snapshotter::read(uint64_t address, uint64_t size) {
  std::vector<uint8_t> out(size);
  if (size == 0) return out;
  if (int r = driver_.copy_to_host(out.data(), address, size); r != 0)
    return Error(ErrorCode::internal, "copying " + hex(size) + " bytes at " + hex(address) +
                                          " to the host failed: " + driver_.error_name(r));
  return out;
}

}  // namespace kir::record
