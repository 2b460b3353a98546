// Launch cost of an empty kernel: ns per <<<>>> launch over N launches (queued,
// then one synchronize). Run bare and under the hook by benchmarks/hook_overhead.py.
#include <chrono>
#include <cstdio>
#include <cstdlib>

__global__ void empty() {}

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 100000;
  cudaFree(nullptr);  // create the context
  for (int i = 0; i < 1000; ++i) empty<<<1, 1>>>();
  cudaDeviceSynchronize();
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) empty<<<1, 1>>>();
  cudaDeviceSynchronize();
  std::chrono::duration<double, std::nano> t = std::chrono::steady_clock::now() - start;
  std::printf("%.1f\n", t.count() / n);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
