// `bench staging` in a build without the CUDA toolkit: the probe says so, and nothing else is
// reachable (run_staging checks the probe before creating a session or pinning memory).
#include "bench/cuda_backend.h"
#include "util/error.h"

namespace dcpctl::bench {
namespace {

[[noreturn]] void not_compiled() {
  throw UnsupportedError(Where(), "CUDA support was not compiled in (dcpctl was built without the CUDA toolkit)");
}

}  // namespace

CudaProbe cuda_probe() {
  CudaProbe p;
  p.reason = "CUDA support was not compiled in (dcpctl was built without the CUDA toolkit)";
  return p;
}

void* cuda_pinned_alloc(uint64_t) {
  not_compiled();
}
void cuda_pinned_free(void*) {}
void cuda_host_register(void*, uint64_t) {
  not_compiled();
}
void cuda_host_unregister(void*) {}

struct DeviceSession::Impl {
  DeviceInfo info;
};

DeviceSession::DeviceSession(int, unsigned) {
  not_compiled();
}
DeviceSession::~DeviceSession() = default;
const DeviceInfo& DeviceSession::info() const {
  return impl_->info;
}
void DeviceSession::prepare_source(uint64_t) {
  not_compiled();
}
double DeviceSession::copy(uint8_t*, const std::vector<Segment>&, bool) {
  not_compiled();
}
bool DeviceSession::gate_timed_out() const {
  return false;
}

}  // namespace dcpctl::bench
