// For tests/test_cli_app_args.py: prints its command line (one line per argument,
// so a test sees exactly what reached the app) and launches kernels whose
// parameter types the demangled name gives (typed) or does not (plain, extern "C"),
// with cudaLaunchKernel, so launches reach the hook even without a GPU.
#include <cstdio>

struct Pair {
  int a, b;
};

__global__ void typed(float f, int i, double* p, unsigned long long u, double d, bool b, short s,
                      unsigned char c, Pair pair, long long neg, float small) {
  if (p && b) p[0] = f + i + u + d + s + c + pair.a + neg + small;
}

extern "C" __global__ void plain(float f, int n) {
  if (n < 0 && f > 0) asm("trap;");
}

int main(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) std::printf("argv[%d]=%s\n", i, argv[i]);
  float f = 2.5f;
  int i = -1024;
  double* p = reinterpret_cast<double*>(0x7f0012345678ULL);
  unsigned long long u = 18446744073709551615ULL;
  double d = 1e-300;
  bool b = true;
  short s = -7;
  unsigned char c = 200;
  Pair pair{1, 2};
  long long neg = -5000000000LL;
  float small = 0.1f;
  void* args[] = {&f, &i, &p, &u, &d, &b, &s, &c, &pair, &neg, &small};
  cudaLaunchKernel(reinterpret_cast<const void*>(typed), dim3(1), dim3(32), args, 0, 0);
  int n = 7;
  void* plain_args[] = {&f, &n};
  cudaLaunchKernel(reinterpret_cast<const void*>(plain), dim3(1), dim3(32), plain_args, 0, 0);
  std::fflush(stdout);
  return 0;
}
