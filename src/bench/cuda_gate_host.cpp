// The gate and the fill without nvcc (a toolkit with the runtime but no compiler): the gate is a
// host function queued on the stream that spins on the flag (CUDA runs later work on the stream
// only once it returns), and the fill copies host-generated pattern bytes to the device.
#include <chrono>
#include <cstring>
#include <vector>

#include "bench/cuda_gate.h"
#include "bench/pattern.h"

namespace dcpctl::bench::detail {
namespace {

void CUDART_CB gate_host_fn(void* arg) {
  const Gate& g = *static_cast<const Gate*>(arg);
  const auto start = std::chrono::steady_clock::now();
  const auto limit = std::chrono::nanoseconds(g.timeout_ns);
  while (g.host->open == 0) {
    if (std::chrono::steady_clock::now() - start > limit) {
      g.host->timed_out = 1;
      return;
    }
  }
}

}  // namespace

cudaError_t launch_gate(cudaStream_t s, const Gate& g) {
  // `g` belongs to the DeviceSession and outlives the host function.
  return cudaLaunchHostFunc(s, gate_host_fn, const_cast<Gate*>(&g));
}

cudaError_t launch_fill(cudaStream_t s, uint8_t* dst, uint64_t bytes) {
  constexpr uint64_t kWindow = uint64_t(16) << 20;
  std::vector<uint8_t> host(static_cast<size_t>(bytes < kWindow ? bytes : kWindow));
  for (uint64_t off = 0; off < bytes; off += kWindow) {
    const uint64_t n = bytes - off < kWindow ? bytes - off : kWindow;
    fill_pattern(host.data(), off, n);
    // Pageable source: the copy has finished with `host` when the call returns to the host, but
    // synchronize anyway so that the next window cannot overtake it.
    if (cudaError_t e = cudaMemcpyAsync(dst + off, host.data(), n, cudaMemcpyHostToDevice, s); e != cudaSuccess)
      return e;
    if (cudaError_t e = cudaStreamSynchronize(s); e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

bool gate_is_kernel() {
  return false;
}

}  // namespace dcpctl::bench::detail
