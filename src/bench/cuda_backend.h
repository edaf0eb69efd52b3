// The CUDA side of `bench staging`, behind a header free of CUDA types so that the rest of the
// library (and the CLI) compiles without the toolkit. Three implementations:
//   cuda_backend.cpp + cuda_kernels.cu   toolkit and nvcc: a spin kernel gates the stream
//   cuda_backend.cpp + cuda_gate_host.cpp toolkit without nvcc: a blocking host function gates it
//   cuda_none.cpp                          no toolkit: everything reports "not compiled in"
// The runtime is linked statically (cudart_static), which loads libcuda.so.1 only when first
// called: without a driver the probe reports why, and every other dcpctl command is unaffected.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench/layout.h"

namespace dcpctl::bench {

struct CudaProbe {
  bool compiled = false;    // built with the CUDA toolkit
  bool kernels = false;     // the gate is a spin kernel (nvcc was available)
  std::string toolkit;      // toolkit version at build time, "" when not compiled
  int runtime_version = 0;  // 13000 = 13.0
  int driver_version = 0;   // 0: no driver
  int device_count = 0;
  bool usable = false;  // at least one device and a working driver
  std::string reason;   // why not usable
};

// Never throws.
CudaProbe cuda_probe();

struct DeviceInfo {
  int index = 0;
  std::string name;
  std::string pci_bus_id;  // as CUDA reports it
  uint64_t memory_bytes = 0;
  int cc_major = 0, cc_minor = 0;
  int copy_engines = 0;  // asyncEngineCount
};

// Page-locked host memory from the CUDA runtime. Throw dcpctl::Error on failure.
void* cuda_pinned_alloc(uint64_t bytes);  // cudaHostAlloc(cudaHostAllocDefault)
void cuda_pinned_free(void* p);
void cuda_host_register(void* p, uint64_t bytes);  // cudaHostRegister(cudaHostRegisterDefault)
void cuda_host_unregister(void* p);

// One device, its streams, events and the gate. Copies go device -> host, from a device buffer
// that holds the pattern (bench/pattern.h) to the same offsets of a host buffer.
class DeviceSession {
 public:
  // Throws UsageError for a device index that does not exist, Error for CUDA failures.
  DeviceSession(int device, unsigned streams);
  ~DeviceSession();
  DeviceSession(const DeviceSession&) = delete;
  DeviceSession& operator=(const DeviceSession&) = delete;

  const DeviceInfo& info() const;

  // Makes the device source at least `bytes` long and fills it with the pattern.
  void prepare_source(uint64_t bytes);

  // Copies every segment (round-robin over the streams) and returns the seconds it took.
  // gated: a gate holds the first stream until every copy is queued, and CUDA events time the
  // copies alone (needs page-locked `dst`). Not gated: the host clock times queuing the copies
  // until the streams are done, which is what a training step waits for.
  double copy(uint8_t* dst, const std::vector<Segment>& segments, bool gated);

  // The last gated copy's gate opened by its timeout, not by the host: the time then includes
  // queuing. Gated copies are limited to kMaxGatedCopies so that queuing never blocks.
  bool gate_timed_out() const;
  static constexpr size_t kMaxGatedCopies = 256;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dcpctl::bench
