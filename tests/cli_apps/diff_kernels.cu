// For `kir diff` tests: built twice, without and with -DVARIANT. The variant
// changes one kernel's body (more registers, a shared array), changes one
// kernel's parameters, removes one kernel and adds another; `same` is identical.
__global__ void same(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 2.0f;
}

#ifndef VARIANT
__global__ void body(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}
__global__ void params(float* x, int n) {
  if (threadIdx.x < n) x[threadIdx.x] = 0.0f;
}
__global__ void removed(int* x) { x[threadIdx.x] = 1; }
#else
__global__ void body(float* x, int n) {
  __shared__ float tile[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  float acc = 0.0f;
  for (int k = 0; k < 256; ++k) acc += tile[k] * tile[(k * 7 + threadIdx.x) & 255];
  if (i < n) x[i] = acc;
}
__global__ void params(float* x, long long n, double scale) {
  if (threadIdx.x < n) x[threadIdx.x] = float(scale);
}
__global__ void added(int* x) { x[threadIdx.x] = 2; }
#endif
