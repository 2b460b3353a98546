// The example kir inspects: a small CUDA program with a few kernels, built for
// two GPU generations plus PTX (see examples/demo.sh for the exact command).
#include <cstdio>

__global__ void saxpy(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

template <int BLOCK>
__global__ void block_sum(const float* in, float* out, int n) {
  __shared__ float partial[BLOCK];
  int i = blockIdx.x * BLOCK + threadIdx.x;
  partial[threadIdx.x] = i < n ? in[i] : 0.0f;
  __syncthreads();
  for (int s = BLOCK / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}

int main() {
  const int n = 1 << 20;
  float *x, *y, *sums;
  if (cudaMalloc(&x, n * sizeof(float)) != cudaSuccess) {
    std::printf("no GPU here: the device code is still in the binary, see `kir inspect`\n");
    return 0;
  }
  cudaMalloc(&y, n * sizeof(float));
  cudaMalloc(&sums, (n / 256) * sizeof(float));
  saxpy<<<n / 256, 256>>>(n, 2.0f, x, y);
  block_sum<256><<<n / 256, 256>>>(y, sums, n);
  cudaDeviceSynchronize();
  std::printf("done\n");
  return 0;
}
