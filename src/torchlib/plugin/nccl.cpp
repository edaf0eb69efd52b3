// The NCCL transport (libdcpctl_nccl.so): loaded by torchlib/plugin/c10d_group.cpp only for --backend nccl, so a
// plain dcpctl never loads CUDA, NCCL or libtorch_cuda. Bytes travel host → GPU → NCCL → GPU →
// pinned host → caller: each rank uses GPU LOCAL_RANK, and NCCL ignores tags, so calls are
// serialized (the caller keeps one message in flight per pair, see Transport::has_tags).
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <cstring>
#include <mutex>
#include <stdexcept>

#include "torchlib/plugin/transport.h"

namespace dcpctl {
namespace {

class NcclTransport final : public Transport {
 public:
  NcclTransport(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, int local_rank,
                std::chrono::milliseconds timeout)
      : timeout_(timeout), device_(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(local_rank)) {
    if (local_rank >= c10::cuda::device_count())
      throw std::runtime_error("unsupported: LOCAL_RANK " + std::to_string(local_rank) + " but this machine has " +
                               std::to_string(c10::cuda::device_count()) + " GPU(s)");
    c10::cuda::set_device(device_.index());
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = timeout;
    pg_ = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, opts);
  }

  void send(int dst, uint32_t, const void* data, uint64_t n) override {
    std::lock_guard<std::mutex> lock(mu_);
    check();
    stage(n);
    std::memcpy(pinned_.data_ptr(), data, n);
    at::Tensor dev = device_buf_.narrow(0, 0, static_cast<int64_t>(n));
    dev.copy_(pinned_.narrow(0, 0, static_cast<int64_t>(n)), /*non_blocking=*/false);
    std::vector<at::Tensor> t{dev};
    pg_->send(t, dst, 0)->wait(timeout_);
    check();  // aborted while waiting: the message may not have gone
    c10::cuda::getCurrentCUDAStream(device_.index()).synchronize();
  }

  void recv(int src, uint32_t, void* data, uint64_t n) override {
    std::lock_guard<std::mutex> lock(mu_);
    check();
    stage(n);
    at::Tensor dev = device_buf_.narrow(0, 0, static_cast<int64_t>(n));
    std::vector<at::Tensor> t{dev};
    pg_->recv(t, src, 0)->wait(timeout_);
    check();  // aborted while waiting: the buffer holds no message
    at::Tensor host = pinned_.narrow(0, 0, static_cast<int64_t>(n));
    host.copy_(dev, /*non_blocking=*/false);
    std::memcpy(data, pinned_.data_ptr(), n);
  }

  bool has_tags() const override { return false; }
  std::string name() const override { return "nccl"; }
  void abort() override {
    aborted_ = true;
    pg_->abort();
  }

 private:
  void check() const {
    if (aborted_) throw std::runtime_error("transfers were cancelled (this rank is failing)");
  }
  // Device and pinned host buffers, grown to the largest message so far.
  void stage(uint64_t n) {
    if (device_buf_.defined() && static_cast<uint64_t>(device_buf_.numel()) >= n) return;
    auto bytes = at::TensorOptions().dtype(at::kByte);
    device_buf_ = at::empty({static_cast<int64_t>(n)}, bytes.device(device_));
    pinned_ = at::empty({static_cast<int64_t>(n)}, bytes.pinned_memory(true));
  }

  std::chrono::milliseconds timeout_;
  c10::Device device_;
  std::mutex mu_;
  std::atomic<bool> aborted_{false};
  at::Tensor device_buf_, pinned_;
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> pg_;
};

}  // namespace
}  // namespace dcpctl

extern "C" __attribute__((visibility("default"))) dcpctl::Transport* dcpctl_make_nccl_transport(
    void* store, int rank, int size, int local_rank, int64_t timeout_ms, char* error, uint64_t error_size) {
  try {
    const auto& s = *static_cast<c10::intrusive_ptr<c10d::Store>*>(store);
    return new dcpctl::NcclTransport(s, rank, size, local_rank, std::chrono::milliseconds(timeout_ms));
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (auto nl = what.find('\n'); nl != std::string::npos) what.resize(nl);
    std::snprintf(error, error_size, "%s", what.c_str());
    return nullptr;
  }
}
