// The kernels of benchmarks/jit_speedup.py: Proteus-style kernels (their runtime
// constants registered as the Proteus pass registers them, Proteus
// src/pass/ProteusPass.cpp: __proteus_create_runtime_constant_info_scalar then
// __proteus_register_function after the runtime's registration; the unit's device
// IR embedded as `_jit_bitcode_tu_*` by tests/support/proteus_layout.py).
//
//   jit_speedup KERNEL [LAUNCHES]
//
// KERNEL: stencil, gemm, flag, daxpy, hydro, ltimes, trap. Runs LAUNCHES timed
// launches (default 200) after 20 warm-up ones; prints on stdout the kernel's
// output checksum (FNV-1a over its output's bytes) and the GPU time per launch
// (CUDA events around the timed launches), and on stderr the app's wall time.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

// 3D 7-point-star-like stencil with a runtime radius (Proteus's benchmarks: runtime extents, radius).
__global__ void stencil3d(const double* in, double* out, int nx, int ny, int nz, int radius, double c0,
                          double c1) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int j = blockIdx.y * blockDim.y + threadIdx.y;
  int k = blockIdx.z * blockDim.z + threadIdx.z;
  if (i < radius || j < radius || k < radius || i >= nx - radius || j >= ny - radius || k >= nz - radius) return;
  long sx = 1, sy = nx, sz = (long)nx * ny;
  long c = i * sx + j * sy + k * sz;
  double s = 0.0;
  for (int r = 1; r <= radius; ++r)
    s += in[c + r * sx] + in[c - r * sx] + in[c + r * sy] + in[c - r * sy] + in[c + r * sz] + in[c - r * sz];
  out[c] = c0 * in[c] + c1 * s;
}

// A batch of small GEMMs (C = A B, row-major, M x K times K x N), one thread per element.
__global__ void bgemm(const double* A, const double* B, double* C, int M, int N, int K, int batch) {
  int b = blockIdx.y;
  int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= batch || e >= M * N) return;
  int row = e / N, col = e % N;
  const double* a = A + (long)b * M * K + (long)row * K;
  const double* bb = B + (long)b * K * N + col;
  double acc = 0.0;
  for (int k = 0; k < K; ++k) acc += a[k] * bb[(long)k * N];
  C[(long)b * M * N + e] = acc;
}

// The code path chosen by a runtime flag (a physics option switch).
__global__ void flagged(const double* x, double* y, int n, int mode, double alpha) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  double v = x[i];
  if (mode == 0) {
    y[i] = alpha * v;
  } else if (mode == 1) {
    y[i] = alpha * v * v + y[i];
  } else if (mode == 2) {
    double s = 0.0;
    for (int t = 0; t < 8; ++t) s = s * v + alpha / (t + 1);
    y[i] = s;
  } else {
    y[i] = exp(-alpha * v * v);
  }
}

// The memory-bound control.
__global__ void daxpy(double a, const double* x, double* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

// RAJAPerf Lcals HYDRO_1D: x[i] = q + y[i] * (r * z[i + 10] + t * z[i + 11]).
__global__ void hydro1d(double* x, const double* y, const double* z, double q, double r, double t, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = q + y[i] * (r * z[i + 10] + t * z[i + 11]);
}

// RAJAPerf Apps LTIMES: phi[z][g][m] += sum_d ell[m][d] * psi[z][g][d], runtime sizes.
__global__ void ltimes(double* phi, const double* ell, const double* psi, int num_d, int num_g, int num_m,
                       int num_z) {
  int m = threadIdx.x;
  int g = blockIdx.y;
  int z = blockIdx.x;
  if (m >= num_m || g >= num_g || z >= num_z) return;
  double acc = 0.0;
  for (int d = 0; d < num_d; ++d) acc += ell[m * num_d + d] * psi[((long)z * num_g + g) * num_d + d];
  phi[((long)z * num_g + g) * num_m + m] += acc;
}

// RAJAPerf Basic TRAP_INT: the trapezoid rule on a runtime integrand, one partial sum per block.
__device__ double trap_f(double x, double y, double xp, double yp) {
  double denom = (x - xp) * (x - xp) + (y - yp) * (y - yp);
  return 1.0 / sqrt(denom);
}
__global__ void trapint(double* partial, double x0, double xp, double y, double yp, double h, int n) {
  __shared__ double sums[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  double v = 0.0;
  if (i < n) v = trap_f(x0 + i * h, y, xp, yp);
  sums[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sums[threadIdx.x] += sums[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sums[0] * h;
}

extern "C" {
__attribute__((weak)) void* __proteus_create_runtime_constant_info_scalar(int32_t type, int32_t position);
__attribute__((weak)) void __proteus_register_function(void* handle, void* stub, char* name, void** infos,
                                                       int32_t count);
}

enum { INT32 = 3, DOUBLE = 6 };  // Proteus include/proteus/CompilerInterfaceTypes.h RuntimeConstantType

static void jit_args(const void* stub, const char* name, std::vector<std::pair<int, int>> args) {
  if (!__proteus_create_runtime_constant_info_scalar || !__proteus_register_function) return;
  std::vector<void*> infos;
  for (auto [type, position] : args) infos.push_back(__proteus_create_runtime_constant_info_scalar(type, position));
  __proteus_register_function(nullptr, const_cast<void*>(stub), const_cast<char*>(name), infos.data(),
                              (int32_t)infos.size());
}

#define CHECK(call)                                                                   \
  do {                                                                                \
    cudaError_t e = (call);                                                           \
    if (e != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

static double* device(const std::vector<double>& host) {
  double* p;
  CHECK(cudaMalloc(&p, host.size() * sizeof(double)));
  CHECK(cudaMemcpy(p, host.data(), host.size() * sizeof(double), cudaMemcpyHostToDevice));
  return p;
}

static std::vector<double> filled(size_t n, double scale) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * std::sin(0.001 * (double)i) + 1.0 / (double)(i % 97 + 1);
  return v;
}

static uint64_t checksum(const double* d, size_t n) {
  std::vector<double> host(n);
  CHECK(cudaMemcpy(host.data(), d, n * sizeof(double), cudaMemcpyDeviceToHost));
  uint64_t h = 1469598103934665603ull;
  const unsigned char* bytes = reinterpret_cast<const unsigned char*>(host.data());
  for (size_t i = 0; i < n * sizeof(double); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  return h;
}

int main(int argc, char** argv) {
  auto wall = std::chrono::steady_clock::now();
  if (argc < 2) {
    std::fprintf(stderr, "usage: jit_speedup KERNEL [LAUNCHES]\n");
    return 2;
  }
  const char* which = argv[1];
  int launches = argc > 2 ? std::atoi(argv[2]) : 200;
  CHECK(cudaFree(nullptr));  // the runtime registers its fatbin and kernels first
  jit_args((const void*)&stencil3d, "_Z9stencil3dPKdPdiiiidd",
           {{INT32, 2}, {INT32, 3}, {INT32, 4}, {INT32, 5}, {DOUBLE, 6}, {DOUBLE, 7}});
  jit_args((const void*)&bgemm, "_Z5bgemmPKdS0_Pdiiii", {{INT32, 3}, {INT32, 4}, {INT32, 5}});
  jit_args((const void*)&flagged, "_Z7flaggedPKdPdiid", {{INT32, 3}, {DOUBLE, 4}});
  jit_args((const void*)&daxpy, "_Z5daxpydPKdPdi", {{DOUBLE, 0}});
  jit_args((const void*)&hydro1d, "_Z7hydro1dPdPKdS1_dddi", {{DOUBLE, 3}, {DOUBLE, 4}, {DOUBLE, 5}});
  jit_args((const void*)&ltimes, "_Z6ltimesPdPKdS1_iiii", {{INT32, 3}, {INT32, 4}, {INT32, 5}});
  jit_args((const void*)&trapint, "_Z7trapintPddddddi", {{DOUBLE, 1}, {DOUBLE, 2}, {DOUBLE, 3}, {DOUBLE, 4}});

  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  double* out = nullptr;
  size_t out_n = 0;
  std::function<void()> launch;
  std::vector<double*> keep;
  if (!std::strcmp(which, "stencil")) {
    const int nx = 128, ny = 128, nz = 128, radius = 2;
    size_t n = (size_t)nx * ny * nz;
    double* in = device(filled(n, 1.0));
    out = device(std::vector<double>(n, 0.0));
    out_n = n;
    launch = [=] { stencil3d<<<dim3(nx / 32, ny / 4, nz / 2), dim3(32, 4, 2)>>>(in, out, nx, ny, nz, radius, 0.4, 0.1); };
  } else if (!std::strcmp(which, "gemm")) {
    const int M = 16, N = 16, K = 16, batch = 4096;
    double* A = device(filled((size_t)batch * M * K, 1.0));
    double* B = device(filled((size_t)batch * K * N, 0.5));
    out = device(std::vector<double>((size_t)batch * M * N, 0.0));
    out_n = (size_t)batch * M * N;
    launch = [=] { bgemm<<<dim3((M * N + 255) / 256, batch), 256>>>(A, B, out, M, N, K, batch); };
  } else if (!std::strcmp(which, "flag")) {
    const int n = 1 << 22;
    double* x = device(filled(n, 1.0));
    out = device(std::vector<double>(n, 0.0));
    out_n = n;
    launch = [=] { flagged<<<(n + 255) / 256, 256>>>(x, out, n, 2, 0.75); };
  } else if (!std::strcmp(which, "daxpy")) {
    const int n = 1 << 24;
    double* x = device(filled(n, 1.0));
    out = device(std::vector<double>(n, 1.0));
    out_n = n;
    launch = [=] { daxpy<<<(n + 255) / 256, 256>>>(1e-3, x, out, n); };
  } else if (!std::strcmp(which, "hydro")) {
    const int n = 1 << 23;
    double* y = device(filled(n, 1.0));
    double* z = device(filled(n + 11, 0.5));
    out = device(std::vector<double>(n, 0.0));
    out_n = n;
    launch = [=] { hydro1d<<<(n + 255) / 256, 256>>>(out, y, z, 0.25, 0.5, 0.75, n); };
  } else if (!std::strcmp(which, "ltimes")) {
    const int num_d = 64, num_g = 32, num_m = 25, num_z = 512;
    double* ell = device(filled((size_t)num_m * num_d, 1.0));
    double* psi = device(filled((size_t)num_z * num_g * num_d, 0.5));
    out = device(std::vector<double>((size_t)num_z * num_g * num_m, 0.0));
    out_n = (size_t)num_z * num_g * num_m;
    launch = [=] { ltimes<<<dim3(num_z, num_g), 32>>>(out, ell, psi, num_d, num_g, num_m, num_z); };
  } else if (!std::strcmp(which, "trap")) {
    const int n = 1 << 22;
    out = device(std::vector<double>(n / 256, 0.0));
    out_n = n / 256;
    launch = [=] { trapint<<<n / 256, 256>>>(out, 0.0, 0.5, 0.3, -0.2, 1.0 / n, n); };
  } else {
    std::fprintf(stderr, "jit_speedup: unknown kernel %s\n", which);
    return 2;
  }
  for (int l = 0; l < 20; ++l) launch();  // warm-up (and, under a compile-on-miss JIT, the compile)
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaEventRecord(start));
  for (int l = 0; l < launches; ++l) launch();
  CHECK(cudaEventRecord(stop));
  CHECK(cudaEventSynchronize(stop));
  CHECK(cudaGetLastError());
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, start, stop));
  std::printf("checksum %016llx\n", static_cast<unsigned long long>(checksum(out, out_n)));
  std::printf("us_per_launch %.4f\n", launches ? 1000.0 * ms / launches : 0.0);
  std::fprintf(stderr, "jit_speedup %s: wall %.3f ms\n", which,
               std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - wall).count());
  return 0;
}
