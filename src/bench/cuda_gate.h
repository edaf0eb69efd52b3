// Internal to the CUDA backend: the gate that holds a stream until every copy is queued (as
// nvbandwidth does), and the kernel that fills the device source with the pattern. Implemented by
// cuda_kernels.cu (nvcc) or cuda_gate_host.cpp (no nvcc).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace dcpctl::bench::detail {

// Lives in page-locked, device-mapped host memory: the host writes `open`, the gate reads it.
struct GateFlags {
  volatile int open;       // the host sets 1 once every copy is queued
  volatile int timed_out;  // the gate sets 1 when it opened by itself after its timeout
};

struct Gate {
  GateFlags* host = nullptr;    // host view
  GateFlags* device = nullptr;  // the same memory seen from the device
  uint64_t timeout_ns = 0;
};

// Queues the gate on `s`: work queued after it on `s` waits until host->open becomes non-zero
// or timeout_ns has passed.
cudaError_t launch_gate(cudaStream_t s, const Gate& g);

// Fills dst[0, bytes) (device memory) with the pattern's bytes [0, bytes), ordered on `s`.
cudaError_t launch_fill(cudaStream_t s, uint8_t* dst, uint64_t bytes);

// True when launch_gate is a spin kernel, false when it is a blocking host function.
bool gate_is_kernel();

}  // namespace dcpctl::bench::detail
