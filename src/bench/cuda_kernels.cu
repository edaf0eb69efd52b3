// The two kernels of `bench staging`: a spin gate (nvbandwidth's method: one thread polls a flag in
// mapped host memory, so every copy queued behind it starts back to back once the host has
// queued them all) and the pattern fill. Whole-program compilation: no device linking needed.
#include "bench/cuda_gate.h"
#include "bench/pattern.h"

namespace dcpctl::bench::detail {
namespace {

__device__ inline unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void gate_kernel(GateFlags* flags, unsigned long long timeout_ns) {
  const unsigned long long start = global_ns();
  while (flags->open == 0) {
    if (global_ns() - start > timeout_ns) {
      flags->timed_out = 1;
      return;
    }
    __nanosleep(256);  // fewer PCIe reads; the copies only start after the gate anyway
  }
}

__global__ void fill_words(uint64_t* words, uint64_t n) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    words[i] = pattern_word(i);
}

__global__ void fill_tail(uint8_t* p, uint64_t from, uint64_t to) {
  for (uint64_t b = from; b < to; ++b) p[b] = pattern_byte(b);
}

}  // namespace

cudaError_t launch_gate(cudaStream_t s, const Gate& g) {
  gate_kernel<<<1, 1, 0, s>>>(g.device, g.timeout_ns);
  return cudaGetLastError();
}

cudaError_t launch_fill(cudaStream_t s, uint8_t* dst, uint64_t bytes) {
  // cudaMalloc returns 256-byte aligned memory, so dst is a valid uint64_t array.
  const uint64_t words = bytes / 8;
  if (words) {
    const uint64_t blocks = (words + 255) / 256;
    fill_words<<<static_cast<unsigned>(blocks < 65535 ? blocks : 65535), 256, 0, s>>>(reinterpret_cast<uint64_t*>(dst),
                                                                                      words);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  if (bytes % 8) {
    fill_tail<<<1, 1, 0, s>>>(dst, words * 8, bytes);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

bool gate_is_kernel() {
  return true;
}

}  // namespace dcpctl::bench::detail
