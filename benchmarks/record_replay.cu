// The GPU side of benchmarks/record_replay.py, one mode per run:
//   bandwidth MIB REPS  pinned device-to-host bandwidth: cudaMemcpy of MIB into
//                       cudaMallocHost memory, best of REPS; prints "d2h_gib_s X"
//   snapshot MIB        `transform` once over two MIB buffers of non-trivial
//                       floats (in: noise, out: the result of an earlier pass)
//   iterate MIB ITERS   ITERS launches of `relax`, each rewriting a different
//                       1/64 of one MIB state buffer
//   native MIB REPS     `transform` once (the launch to record), then REPS more
//                       timed one by one with CUDA events; prints "native_ms X"
//                       (the median)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CHECK(call)                                                                                     \
  do {                                                                                                  \
    cudaError_t e_ = (call);                                                                            \
    if (e_ != cudaSuccess) {                                                                            \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));       \
      std::exit(1);                                                                                     \
    }                                                                                                   \
  } while (0)

__device__ __forceinline__ float noise(unsigned long long i) {
  unsigned long long z = i + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return float(z >> 40) * (1.0f / 8388608.0f) - 1.0f;
}

__global__ void init(float* x, size_t n, unsigned long long seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    x[i] = noise(seed << 40 ^ i);
}

__global__ void transform(const float* __restrict__ in, float* __restrict__ out, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    float x = in[i];
    out[i] = fmaf(x, __sinf(3.1f * x), 0.5f * out[i]);
  }
}

__global__ void relax(float* __restrict__ state, size_t offset, size_t count, int iteration) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
    float x = state[offset + i];
    state[offset + i] = fmaf(0.75f, x, 0.25f * noise((unsigned long long)iteration << 40 ^ i));
  }
}

static size_t mib(const char* text) { return size_t(std::strtoull(text, nullptr, 10)) << 20; }

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s bandwidth|snapshot|iterate|native MIB [N]\n", argv[0]);
    return 2;
  }
  const char* mode = argv[1];
  const size_t bytes = mib(argv[2]), n = bytes / sizeof(float);
  const int count = argc > 3 ? std::atoi(argv[3]) : 10;
  const int grid = 132 * 8, block = 256;
  if (!std::strcmp(mode, "bandwidth")) {
    float *device, *host;
    CHECK(cudaMalloc(&device, bytes));
    CHECK(cudaMallocHost(&host, bytes));
    init<<<grid, block>>>(device, n, 1);
    CHECK(cudaDeviceSynchronize());
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    float best = 1e30f;
    for (int r = 0; r < count; ++r) {
      CHECK(cudaEventRecord(start));
      CHECK(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost));
      CHECK(cudaEventRecord(stop));
      CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, start, stop));
      best = std::min(best, ms);
    }
    std::printf("d2h_gib_s %.3f\n", double(bytes) / (1 << 30) / (best / 1e3));
    CHECK(cudaFreeHost(host));
    CHECK(cudaFree(device));
  } else if (!std::strcmp(mode, "snapshot") || !std::strcmp(mode, "native")) {
    float *in, *out;
    CHECK(cudaMalloc(&in, bytes));
    CHECK(cudaMalloc(&out, bytes));
    init<<<grid, block>>>(in, n, 1);
    init<<<grid, block>>>(out, n, 2);
    transform<<<grid, block>>>(in, out, n);  // the launch a recording keeps
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    if (!std::strcmp(mode, "native")) {
      cudaEvent_t start, stop;
      CHECK(cudaEventCreate(&start));
      CHECK(cudaEventCreate(&stop));
      std::vector<float> times;
      for (int r = 0; r < count; ++r) {
        CHECK(cudaEventRecord(start));
        transform<<<grid, block>>>(in, out, n);
        CHECK(cudaEventRecord(stop));
        CHECK(cudaEventSynchronize(stop));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, start, stop));
        times.push_back(ms);
      }
      std::sort(times.begin(), times.end());
      std::printf("native_ms %.6f\n", times[times.size() / 2]);
    }
    CHECK(cudaFree(in));
    CHECK(cudaFree(out));
  } else if (!std::strcmp(mode, "iterate")) {
    float* state;
    CHECK(cudaMalloc(&state, bytes));
    init<<<grid, block>>>(state, n, 3);
    const size_t window = n / 64;
    for (int it = 0; it < count; ++it) {
      relax<<<grid, block>>>(state, (size_t(it) * 37 % 64) * window, window, it);
      CHECK(cudaGetLastError());
    }
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaFree(state));
  } else {
    std::fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
  }
  std::printf("%s done\n", mode);
  return 0;
}
