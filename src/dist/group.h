// Running one job as several processes (torchrun, or any launcher that sets RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT). The processes meet through c10d's TCPStore, the store torchrun
// itself uses: with TORCHELASTIC_USE_AGENT_STORE=True the launcher hosts it and every rank is a
// client, otherwise rank 0 hosts it. Keys live under "dcpctl/<restart count>/".
//
// The Group is what the library's commands see: agreement on the plan, small values published
// by one rank and read by others, and a status per rank so that a failure anywhere ends every
// rank with a message naming the rank that failed (or did not answer within the timeout).
// Bulk data never goes through the store: it travels through a c10d process group (Gloo over
// TCP by default, NCCL through the GPUs), opened by connect_transport() when a command needs it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "util/error.h"

namespace dcpctl {

struct LaunchEnv {
  int rank = 0, world_size = 1, local_rank = 0;
  std::string master_addr;
  int master_port = 0;
  bool agent_store = false;
  int restart_count = 0;
  // From the environment; nullopt when WORLD_SIZE is unset or 1.
  static std::optional<LaunchEnv> from_environment();
};

class Group {
 public:
  virtual ~Group() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Every rank passes the digest of its plan (command + checkpoint); all must be equal, else
  // every rank throws UsageError naming the ranks that differ.
  virtual void agree(const std::string& what, const std::string& digest) = 0;
  virtual void publish(const std::string& key, const std::string& value) = 0;
  virtual std::string fetch(const std::string& key) = 0;  // waits up to the timeout
  // Each rank reports how its part of `phase` ended (empty error = success) and the exit code its
  // error maps to. report() does not wait; collect() (rank 0) waits for every rank and throws on
  // the first failure, as the error class of that rank's exit code (so rank 0 exits with the
  // code of the rank that failed), or on silence.
  virtual void report(const std::string& phase, const std::string& error, ExitCode code) = 0;
  virtual void collect(const std::string& phase) = 0;
  // Rank 0 announces the outcome of `phase` with the exit code its error maps to; the others wait
  // for it and throw on failure as the error class of that code, so every rank exits with the
  // code of the failure (3 for a damaged checkpoint, ...), not a generic 1.
  virtual void announce(const std::string& phase, const std::string& error, ExitCode code) = 0;
  virtual void await(const std::string& phase) = 0;

  // Opens the process group that carries bulk bytes (collective: every rank calls it).
  virtual void connect_transport() = 0;
  // Bulk bytes. send() returns once the receiver has taken them; between two ranks, messages on
  // one tag arrive in the order they were sent, and a recv must name the size that was sent.
  // Safe from several threads (one message in flight per tag and peer). Throws IoError naming
  // the peer when it fails, dies or stays silent past the timeout.
  virtual void send(int dst, uint32_t tag, const void* data, uint64_t n) = 0;
  virtual void recv(int src, uint32_t tag, void* data, uint64_t n) = 0;
  virtual std::string backend_name() const = 0;
  // Cancels this rank's transfers in flight and refuses new ones (see Transport::abort).
  virtual void abort_transfers() = 0;
  // False when the backend ignores tags (NCCL): keep one message in flight per pair of ranks.
  virtual bool tagged() = 0;

  // ---- collectives built on the above (dist/collectives.cpp), the same on every backend ----
  // Every rank's `value` under `key`, in rank order (through the store: small values only).
  // Collective: every rank calls it with the same key.
  std::vector<std::string> all_gather(const std::string& key, const std::string& value);
  // `n` bytes from `src` to rank `dst` on `tag`, in messages of at most kPiece bytes (Gloo's
  // buffers stay bounded whatever the size); `fill(at, buf, len)` supplies bytes [at, at + len).
  // The receiver calls recv_pieces with the same n and tag; `take(at, buf, len)` gets them.
  static constexpr uint64_t kPiece = 16ull << 20;
  void send_pieces(int dst, uint32_t tag, uint64_t n, const std::function<void(uint64_t, uint8_t*, uint64_t)>& fill);
  void recv_pieces(int src, uint32_t tag, uint64_t n,
                   const std::function<void(uint64_t, const uint8_t*, uint64_t)>& take);
};

enum class Backend { Gloo, Nccl };

std::unique_ptr<Group> connect_group(const LaunchEnv& env, std::chrono::seconds timeout,
                                     Backend backend = Backend::Gloo);

}  // namespace dcpctl
