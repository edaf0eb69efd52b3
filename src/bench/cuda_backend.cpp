// The CUDA runtime side of `bench staging` (see cuda_backend.h).
#include "bench/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <stdexcept>

#include "bench/cuda_gate.h"
#include "bench/sizes.h"
#include "util/error.h"

#ifndef DCPCTL_BENCH_CUDA_TOOLKIT
#define DCPCTL_BENCH_CUDA_TOOLKIT "unknown"
#endif

namespace dcpctl::bench {
namespace {

[[noreturn]] void fail(cudaError_t e, const std::string& what) {
  throw Error(Where(), what + " failed: " + cudaGetErrorString(e) + " (" + cudaGetErrorName(e) + ")");
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(e, what);
}

// Long enough for any sane number of queued copies, short enough that a bug does not hang.
constexpr uint64_t kGateTimeoutNs = 10'000'000'000ull;

}  // namespace

CudaProbe cuda_probe() {
  CudaProbe p;
  p.compiled = true;
  p.kernels = detail::gate_is_kernel();
  p.toolkit = DCPCTL_BENCH_CUDA_TOOLKIT;
  if (cudaRuntimeGetVersion(&p.runtime_version) != cudaSuccess) p.runtime_version = 0;
  // cudaDriverGetVersion succeeds with 0 when no driver is installed.
  if (cudaDriverGetVersion(&p.driver_version) != cudaSuccess) p.driver_version = 0;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    const std::string err = std::string(cudaGetErrorName(e)) + " from cudaGetDeviceCount";
    p.reason = p.driver_version == 0 ? "no NVIDIA driver (libcuda.so.1 could not be loaded; " + err + ")"
                                     : std::string(cudaGetErrorString(e)) + " (" + err + ")";
    (void)cudaGetLastError();
    return p;
  }
  p.device_count = n;
  if (n == 0) {
    p.reason = "the driver reports no CUDA device";
    return p;
  }
  p.usable = true;
  return p;
}

void* cuda_pinned_alloc(uint64_t bytes) {
  void* p = nullptr;
  cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    fail(e, "cudaHostAlloc(" + format_size(bytes) + ")");
  }
  return p;
}

void cuda_pinned_free(void* p) {
  if (p) check(cudaFreeHost(p), "cudaFreeHost");
}

void cuda_host_register(void* p, uint64_t bytes) {
  cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterDefault);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    fail(e, "cudaHostRegister(" + format_size(bytes) + ")");
  }
}

void cuda_host_unregister(void* p) {
  check(cudaHostUnregister(p), "cudaHostUnregister");
}

struct DeviceSession::Impl {
  DeviceInfo info;
  std::vector<cudaStream_t> streams;
  std::vector<cudaEvent_t> done;  // done[s]: stream s finished its copies (s >= 1)
  cudaEvent_t start = nullptr, stop = nullptr;
  uint8_t* src = nullptr;
  uint64_t src_bytes = 0;
  detail::Gate gate;
  bool timed_out = false;

  void release_gate() {
    if (!gate.host) return;
    std::atomic_thread_fence(std::memory_order_seq_cst);
    gate.host->open = 1;
  }

  // Best effort: never throws (runs in the destructor and after failures).
  void destroy() {
    release_gate();
    for (cudaStream_t s : streams) (void)cudaStreamSynchronize(s);
    for (cudaEvent_t e : done)
      if (e) (void)cudaEventDestroy(e);
    if (start) (void)cudaEventDestroy(start);
    if (stop) (void)cudaEventDestroy(stop);
    for (cudaStream_t s : streams) (void)cudaStreamDestroy(s);
    if (src) (void)cudaFree(src);
    if (gate.host) (void)cudaFreeHost(gate.host);
    (void)cudaGetLastError();
  }
};

DeviceSession::DeviceSession(int device, unsigned nstreams) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  int count = 0;
  check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (device < 0 || device >= count)
    throw UsageError(Where(), "no CUDA device " + std::to_string(device) + " (this machine has " +
                                  std::to_string(count) + ": 0.." + std::to_string(count - 1) + ")");
  check(cudaSetDevice(device), "cudaSetDevice");
  try {
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    m.info.index = device;
    m.info.name = prop.name;
    m.info.memory_bytes = prop.totalGlobalMem;
    m.info.cc_major = prop.major;
    m.info.cc_minor = prop.minor;
    m.info.copy_engines = prop.asyncEngineCount;
    char bus[64] = {0};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, device) == cudaSuccess) m.info.pci_bus_id = bus;
    (void)cudaGetLastError();

    for (unsigned s = 0; s < std::max(1u, nstreams); ++s) {
      cudaStream_t st = nullptr;
      check(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
      m.streams.push_back(st);
      cudaEvent_t ev = nullptr;
      if (s > 0) check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreateWithFlags");
      m.done.push_back(ev);
    }
    check(cudaEventCreate(&m.start), "cudaEventCreate");
    check(cudaEventCreate(&m.stop), "cudaEventCreate");

    void* flags = nullptr;
    check(cudaHostAlloc(&flags, sizeof(detail::GateFlags), cudaHostAllocMapped), "cudaHostAlloc(gate flags)");
    m.gate.host = static_cast<detail::GateFlags*>(flags);
    m.gate.host->open = 1;
    m.gate.host->timed_out = 0;
    void* dflags = nullptr;
    check(cudaHostGetDevicePointer(&dflags, flags, 0), "cudaHostGetDevicePointer");
    m.gate.device = static_cast<detail::GateFlags*>(dflags);
    m.gate.timeout_ns = kGateTimeoutNs;
  } catch (...) {
    m.destroy();
    throw;
  }
}

DeviceSession::~DeviceSession() {
  impl_->destroy();
}

const DeviceInfo& DeviceSession::info() const {
  return impl_->info;
}

bool DeviceSession::gate_timed_out() const {
  return impl_->timed_out;
}

void DeviceSession::prepare_source(uint64_t bytes) {
  Impl& m = *impl_;
  if (bytes <= m.src_bytes) return;
  if (m.src) {
    check(cudaFree(m.src), "cudaFree");
    m.src = nullptr;
    m.src_bytes = 0;
  }
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    fail(e, "cudaMalloc(" + format_size(bytes) + ") on device " + std::to_string(m.info.index));
  }
  m.src = static_cast<uint8_t*>(p);
  m.src_bytes = bytes;
  check(detail::launch_fill(m.streams[0], m.src, bytes), "filling the device buffer");
  check(cudaStreamSynchronize(m.streams[0]), "cudaStreamSynchronize");
}

double DeviceSession::copy(uint8_t* dst, const std::vector<Segment>& segs, bool gated) {
  Impl& m = *impl_;
  const size_t k = m.streams.size();
  for (const Segment& s : segs)
    if (s.offset + s.bytes > m.src_bytes) throw std::logic_error("DeviceSession::copy: segment past the device buffer");
  auto enqueue = [&] {
    for (size_t i = 0; i < segs.size(); ++i)
      if (segs[i].bytes)
        check(cudaMemcpyAsync(dst + segs[i].offset, m.src + segs[i].offset, segs[i].bytes, cudaMemcpyDeviceToHost,
                              m.streams[i % k]),
              "cudaMemcpyAsync (device to host)");
  };

  if (!gated) {
    const auto t0 = std::chrono::steady_clock::now();
    enqueue();
    for (cudaStream_t s : m.streams) check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  // A copy to pageable memory is synchronous for the host: queued behind a closed gate it would
  // wait for the timeout. Only page-locked destinations are gated.
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, dst) != cudaSuccess || attr.type != cudaMemoryTypeHost) {
    (void)cudaGetLastError();
    throw std::logic_error("DeviceSession::copy: a gated copy needs page-locked host memory");
  }
  if (segs.size() > kMaxGatedCopies) throw std::logic_error("DeviceSession::copy: too many copies to gate");

  m.gate.host->open = 0;
  m.gate.host->timed_out = 0;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  try {
    check(detail::launch_gate(m.streams[0], m.gate), "launching the gate");
    check(cudaEventRecord(m.start, m.streams[0]), "cudaEventRecord");
    for (size_t s = 1; s < k; ++s) check(cudaStreamWaitEvent(m.streams[s], m.start, 0), "cudaStreamWaitEvent");
    enqueue();
    for (size_t s = 1; s < k; ++s) {
      check(cudaEventRecord(m.done[s], m.streams[s]), "cudaEventRecord");
      check(cudaStreamWaitEvent(m.streams[0], m.done[s], 0), "cudaStreamWaitEvent");
    }
    check(cudaEventRecord(m.stop, m.streams[0]), "cudaEventRecord");
  } catch (...) {
    m.release_gate();
    throw;
  }
  m.release_gate();
  check(cudaEventSynchronize(m.stop), "cudaEventSynchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, m.start, m.stop), "cudaEventElapsedTime");
  m.timed_out = m.gate.host->timed_out != 0;
  return static_cast<double>(ms) / 1e3;
}

}  // namespace dcpctl::bench
