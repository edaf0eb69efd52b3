// Bulk bytes between ranks through a c10d process-group backend. The c10d headers stay out of
// this header: the NCCL transport lives in a plugin (libdcpctl_nccl.so, loaded only for
// --backend nccl) so that a plain run never loads CUDA or NCCL.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace c10d {
class Store;
}

namespace dcpctl {

class Transport {
 public:
  virtual ~Transport() = default;
  // See Group::send / Group::recv. Errors are std::exception; the Group adds who and what.
  virtual void send(int dst, uint32_t tag, const void* data, uint64_t n) = 0;
  virtual void recv(int src, uint32_t tag, void* data, uint64_t n) = 0;
  // False when the backend ignores tags (NCCL): then all messages between two ranks share one
  // ordered stream, and callers keep one message in flight per pair.
  virtual bool has_tags() const = 0;
  // Cancels every transfer in flight (their calls throw) and refuses new ones: a failing rank
  // stops its other threads at once instead of leaving them to wait out the timeout.
  virtual void abort() = 0;
  virtual std::string name() const = 0;
};

// The plugin's entry point (extern "C", resolved with dlsym): a transport over `store` (a
// c10::intrusive_ptr<c10d::Store>*), for `rank` of `size`, GPU `local_rank`. Returns nullptr and
// fills `error` (NUL-terminated, `error_size` bytes) on failure; an error that starts with
// "unsupported: " means this machine cannot run the backend (no GPU for the rank).
using MakeTransportFn = Transport* (*)(void* store, int rank, int size, int local_rank, int64_t timeout_ms, char* error,
                                       uint64_t error_size);
inline constexpr const char* kNcclPlugin = "libdcpctl_nccl.so";
inline constexpr const char* kNcclEntry = "dcpctl_make_nccl_transport";

}  // namespace dcpctl
