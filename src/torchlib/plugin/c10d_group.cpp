#include "dist/group.h"

#include <c10/util/Logging.h>
#include <dlfcn.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#if DCPCTL_HAVE_GLOO
#include <ATen/ops/from_blob.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "torchlib/plugin/transport.h"
#include "torchlib/torchlib.h"
#include "util/error.h"

namespace dcpctl {

namespace {

std::vector<uint8_t> bytes_of(const std::string& s) {
  return {s.begin(), s.end()};
}
std::string string_of(const std::vector<uint8_t>& v) {
  return {v.begin(), v.end()};
}

// The first line of a c10d/Gloo message, without Gloo's boilerplate advice.
std::string first_line(std::string s) {
  if (auto nl = s.find('\n'); nl != std::string::npos) s.resize(nl);
  if (auto advice = s.find(". This is typically caused"); advice != std::string::npos) s.resize(advice);
  return s;
}

#if DCPCTL_HAVE_GLOO
// Gloo over TCP: CPU tensors wrap the caller's bytes (no copy). Gloo matches messages by peer
// and tag; the process group's calls are posted under a lock, the waits run unlocked.
class GlooTransport final : public Transport {
 public:
  GlooTransport(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout)
      : timeout_(timeout) {
    pg_ = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options<c10d::ProcessGroupGloo>(timeout, 0));
  }
  void send(int dst, uint32_t tag, const void* data, uint64_t n) override {
    std::vector<at::Tensor> t{wrap(const_cast<void*>(data), n)};
    run([&] { return pg_->send(t, dst, static_cast<int>(tag)); });
  }
  void recv(int src, uint32_t tag, void* data, uint64_t n) override {
    std::vector<at::Tensor> t{wrap(data, n)};
    run([&] { return pg_->recv(t, src, static_cast<int>(tag)); });
  }
  void abort() override {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_ = true;
    for (auto& w : inflight_) w->abort();
  }
  bool has_tags() const override { return true; }
  std::string name() const override { return "gloo"; }

 private:
  template <class Post>
  void run(Post&& post) {
    c10::intrusive_ptr<c10d::Work> w;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (aborted_) throw std::runtime_error("transfers were cancelled (this rank is failing)");
      w = post();
      inflight_.push_back(w);
    }
    auto forget = [&] {
      std::lock_guard<std::mutex> lock(mu_);
      inflight_.erase(std::find(inflight_.begin(), inflight_.end(), w));
    };
    bool done = false;
    try {
      done = w->wait(timeout_);
    } catch (...) {
      forget();
      throw;
    }
    forget();
    // An aborted send or receive returns false instead of throwing (c10d's Gloo SendWork and
    // RecvWork::wait): its buffer holds nothing received, and must not be read as a message.
    if (!done) throw std::runtime_error("transfers were cancelled (this rank is failing)");
  }

  // Recent torch makes default options (a device, the thread count) with Options::create_default;
  // older releases (2.6) have only Options::create, and the device is added by hand.
  template <class PG>
  static auto options(std::chrono::milliseconds timeout, int) -> decltype(PG::Options::create_default(timeout)) {
    return PG::Options::create_default(timeout);
  }
  template <class PG>
  static c10::intrusive_ptr<typename PG::Options> options(std::chrono::milliseconds timeout, long) {
    auto o = PG::Options::create(timeout);
    o->devices.push_back(PG::createDefaultDevice());
    return o;
  }

  static at::Tensor wrap(void* p, uint64_t n) {
    static uint8_t empty;
    return at::from_blob(n ? p : &empty, {static_cast<int64_t>(n)}, at::TensorOptions().dtype(at::kByte));
  }
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  bool aborted_ = false;
  std::vector<c10::intrusive_ptr<c10d::Work>> inflight_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
};
#endif

std::string status_text(const std::string& error, ExitCode code) {
  return "error " + std::to_string(static_cast<int>(code)) + ": " + error;
}

// {exit code, message} of "error <code>: <message>"; anything else is a failure (1) as it is.
std::pair<ExitCode, std::string> parse_status(const std::string& s) {
  size_t colon = s.find(": ");
  if (s.rfind("error ", 0) == 0 && colon != std::string::npos) {
    int code = std::atoi(s.substr(6, colon - 6).c_str());
    if (code >= 1 && code <= 5) return {static_cast<ExitCode>(code), s.substr(colon + 2)};
  }
  return {ExitCode::failure, s};
}

class StoreGroup final : public Group {
 public:
  StoreGroup(const LaunchEnv& e, std::chrono::seconds timeout, Backend backend)
      : env_(e), timeout_(timeout), backend_(backend) {
    // c10d logs a warning (with a C++ stack) for every socket a failed peer closes; dcpctl says
    // what failed in one line itself. TORCH_CPP_LOG_LEVEL still chooses, when set.
    if (!std::getenv("TORCH_CPP_LOG_LEVEL")) FLAGS_caffe2_log_level = std::max(FLAGS_caffe2_log_level, 2);
    c10d::TCPStoreOptions opts;
    opts.port = static_cast<uint16_t>(e.master_port);
    opts.isServer = e.rank == 0 && !e.agent_store;
    opts.numWorkers = e.agent_store ? std::nullopt : std::optional<std::size_t>(static_cast<size_t>(e.world_size));
    opts.waitWorkers = false;
    opts.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
    try {
      store_ = c10::make_intrusive<c10d::TCPStore>(e.master_addr, opts);
    } catch (const std::exception& ex) {
      throw IoError(Where(), "rank " + std::to_string(e.rank) + ": cannot reach the c10d store at " + e.master_addr +
                                 ":" + std::to_string(e.master_port) + ": " + first_line(ex.what()));
    }
    prefix_ = "dcpctl/" + std::to_string(e.restart_count) + "/";
  }

  // The process hosting the store must outlive every reader of the final outcome: the others
  // say goodbye, and the host waits (briefly) for them before closing the store.
  ~StoreGroup() override {
    // Closing the process group first fails at once any peer still sending to or receiving from
    // this rank (it would otherwise wait out its timeout).
    transport_.reset();
    try {
      if (rank() != 0) {
        store_->set(prefix_ + "bye/" + std::to_string(rank()), bytes_of("bye"));
      } else if (!env_.agent_store) {
        std::vector<std::string> keys;
        for (int r = 1; r < size(); ++r) keys.push_back(prefix_ + "bye/" + std::to_string(r));
        // After a failure a dead rank never says goodbye; the living learn the outcome at once
        // (their transfers to this rank fail when the process group closes above).
        int64_t ms = failed_ ? 3000 : std::min<int64_t>(10000, timeout_.count() * 1000);
        store_->wait(keys, std::chrono::milliseconds(ms));
      }
    } catch (...) {
      // A rank that died never says goodbye; its failure was already reported.
    }
  }

  int rank() const override { return env_.rank; }
  int size() const override { return env_.world_size; }

  void agree(const std::string& what, const std::string& digest) override {
    publish("agree/" + what + "/" + std::to_string(rank()), digest);
    if (rank() == 0) {
      std::string bad;
      for (int r = 1; r < size(); ++r) {
        std::string d = get("agree/" + what + "/" + std::to_string(r), r);
        if (d != digest) bad += (bad.empty() ? "" : ", ") + std::to_string(r);
      }
      announce("agree/" + what,
               bad.empty()
                   ? ""
                   : "rank(s) " + bad + " were given a different command or see a different checkpoint than rank 0",
               ExitCode::usage);
    }
    await_impl("agree/" + what, true);
  }

  void publish(const std::string& key, const std::string& value) override { set(key, value); }
  std::string fetch(const std::string& key) override { return get(key, -1); }

  // A status is "ok" or "error <exit code>: <message>".
  void report(const std::string& phase, const std::string& error, ExitCode code) override {
    set("status/" + phase + "/" + std::to_string(rank()), error.empty() ? "ok" : status_text(error, code));
  }

  void collect(const std::string& phase) override {
    for (int r = 1; r < size(); ++r) {
      std::string s = get("status/" + phase + "/" + std::to_string(r), r);
      if (s == "ok") continue;
      auto [code, why] = parse_status(s);
      throw_error(code, Where(), "rank " + std::to_string(r) + " failed: " + why);
    }
  }

  // An outcome is "ok" or "error <exit code>: <message>", as a status.
  void announce(const std::string& phase, const std::string& error, ExitCode code) override {
    failed_ = failed_ || !error.empty();
    set("outcome/" + phase, error.empty() ? "ok" : status_text(error, code));
  }

  void await(const std::string& phase) override { await_impl(phase, false); }

  void connect_transport() override {
    if (transport_) return;
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout_);
    c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::PrefixStore>(prefix_ + "pg", store_);
    std::string error;
    try {
      if (backend_ == Backend::Nccl) {
        transport_ = load_nccl(store, ms);
      } else {
#if DCPCTL_HAVE_GLOO
        transport_ = std::make_unique<GlooTransport>(store, rank(), size(), ms);
#else
        error =
            "this dcpctl was built without Gloo's headers (tools/dev.sh setup fetches them); "
            "rebuild, or use --backend nccl";
#endif
      }
    } catch (const std::exception& ex) {
      error = first_line(ex.what());
    }
    // Every rank says whether it is connected, and none goes on before all are: a rank that went
    // on alone to a refusal every rank makes alike (consolidate's memory plan) closed its end of
    // the mesh while another was still inside the handshake, which then ended with an I/O error
    // instead of that same refusal (memory-torchrun-zstd, once in a clean-clone CI run).
    publish("transport/" + std::to_string(rank()), transport_ ? "up" : "down");
    if (!transport_) {
      std::string what = "rank " + std::to_string(rank()) + ": cannot open the " + backend_name() + " process group: ";
      if (error.rfind("unsupported: ", 0) == 0) throw UnsupportedError(Where(), what + error.substr(13));
      throw IoError(Where(), what + error);
    }
    for (int r = 0; r < size(); ++r)
      if (r != rank() && get("transport/" + std::to_string(r), r) != "up")
        throw IoError(Where(), "rank " + std::to_string(rank()) + ": rank " + std::to_string(r) +
                                   " could not open the " + backend_name() + " process group");
  }

  void send(int dst, uint32_t tag, const void* data, uint64_t n) override {
    transfer("sending " + std::to_string(n) + " bytes to", dst, [&] { transport().send(dst, tag, data, n); });
  }

  void recv(int src, uint32_t tag, void* data, uint64_t n) override {
    transfer("receiving " + std::to_string(n) + " bytes from", src, [&] { transport().recv(src, tag, data, n); });
  }

  std::string backend_name() const override {
    return backend_ == Backend::Nccl ? "nccl" : "gloo";
  }
  bool tagged() override {
    return transport().has_tags();
  }
  void abort_transfers() override {
    if (transport_) transport_->abort();
  }

 private:
  // Runs one transfer with `peer`; a backend failure becomes an IoError naming both ranks.
  template <class F>
  void transfer(const std::string& what, int peer, F&& f) {
    try {
      f();
    } catch (const Error&) {
      throw;
    } catch (const std::exception& ex) {
      explain_transport_failure();
      throw IoError(Where(), "rank " + std::to_string(rank()) + ": " + what + " rank " + std::to_string(peer) +
                                 " failed (" + backend_name() + "): " + first_line(ex.what()) + "; rank " +
                                 std::to_string(peer) + " died or hung (see --timeout)");
    }
  }

  // A peer closing the connection is usually rank 0 ending a failed run: say so when it did.
  void explain_transport_failure() {
    if (rank() == 0) return;
    std::string key = prefix_ + "outcome/commit";
    try {
      if (!store_->check({key})) return;
      std::string s = string_of(store_->get(key));
      if (s != "ok") {
        auto [code, why] = parse_status(s);
        throw_error(code, Where(), "rank 0 ended the run: " + why);
      }
    } catch (const Error&) {
      throw;
    } catch (const std::exception&) {
      // The store is gone too: report the transport failure itself.
    }
  }

  Transport& transport() {
    if (!transport_) throw Error(Where(), "internal: bulk transfer before connect_transport()");
    return *transport_;
  }

  // The NCCL transport is a plugin found where the LibTorch plugin is (torchlib::plugin_candidates).
  std::unique_ptr<Transport> load_nccl(c10::intrusive_ptr<c10d::Store> store, std::chrono::milliseconds ms) {
    void* h = nullptr;
    std::string why;
    for (const std::string& path : torchlib::plugin_candidates(kNcclPlugin)) {
      h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (h) break;
      const char* e = ::dlerror();
      why = e ? e : "?";
    }
    if (!h) h = ::dlopen(kNcclPlugin, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = ::dlerror();
      if (why.empty()) why = e ? e : "?";
      throw std::runtime_error(std::string(kNcclPlugin) +
                               " is not available (this build has no CUDA/NCCL support, "
                               "or it cannot load: " +
                               why + ")");
    }
    auto make = reinterpret_cast<MakeTransportFn>(::dlsym(h, kNcclEntry));
    if (!make) throw std::runtime_error(std::string(kNcclPlugin) + " lacks " + kNcclEntry);
    char err[1024] = {0};
    Transport* t = make(&store, rank(), size(), env_.local_rank, ms.count(), err, sizeof err);
    if (!t) throw std::runtime_error(err);
    return std::unique_ptr<Transport>(t);
  }

  void await_impl(const std::string& phase, bool usage) {
    if (rank() == 0 && phase.rfind("agree/", 0) != 0) return;
    std::string s = get("outcome/" + phase, 0);
    if (s == "ok") return;
    auto [code, why] = parse_status(s);
    // An agreement that failed is a usage error (announced as such); rank 0 may also end the run
    // at that point with a failure of its own, and its code.
    if (usage) throw_error(code, Where(), why);
    // Every rank ends with the exit code of the failure rank 0 announced (3 for an invalid
    // checkpoint, 4 for I/O, ...), not a generic 1.
    throw_error(code, Where(), "rank 0 ended the run: " + why);
  }

  void set(const std::string& key, const std::string& value) {
    try {
      store_->set(prefix_ + key, bytes_of(value));
    } catch (const std::exception& ex) {
      throw IoError(Where(), "rank " + std::to_string(rank()) + ": the c10d store failed: " + first_line(ex.what()));
    }
  }

  // Waits for `key`; `from` names the rank expected to write it (-1: any) for the message.
  std::string get(const std::string& key, int from) {
    try {
      store_->wait({prefix_ + key}, std::chrono::duration_cast<std::chrono::milliseconds>(timeout_));
      return string_of(store_->get(prefix_ + key));
    } catch (const std::exception& ex) {
      std::string who = from >= 0 ? "rank " + std::to_string(from) : "the other ranks";
      throw IoError(Where(), "rank " + std::to_string(rank()) + ": no answer from " + who + " within " +
                                 std::to_string(timeout_.count()) + " s (" + key + "): " + first_line(ex.what()) +
                                 "; a rank died or hung (see --timeout)");
    }
  }

  LaunchEnv env_;
  std::chrono::seconds timeout_;
  Backend backend_;
  c10::intrusive_ptr<c10d::TCPStore> store_;
  std::string prefix_;
  std::unique_ptr<Transport> transport_;
  bool failed_ = false;
};

}  // namespace

std::unique_ptr<Group> torchlib::connect_store_group(const LaunchEnv& env, std::chrono::seconds timeout,
                                                     Backend backend) {
  return std::make_unique<StoreGroup>(env, timeout, backend);
}

}  // namespace dcpctl
