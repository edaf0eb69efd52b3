#include "dist/group.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "util/error.h"

namespace dcpctl {

namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

int env_int(const char* name, int fallback) {
  auto v = env(name);
  if (!v) return fallback;
  char* end = nullptr;
  long x = std::strtol(v->c_str(), &end, 10);
  if (end != v->c_str() + v->size() || x < 0 || x > 1 << 24)
    throw UsageError(Where(), std::string("environment variable ") + name + "='" + *v + "' is not a valid number");
  return static_cast<int>(x);
}

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }
std::string string_of(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }

class StoreGroup final : public Group {
 public:
  StoreGroup(const LaunchEnv& e, std::chrono::seconds timeout) : env_(e), timeout_(timeout) {
    c10d::TCPStoreOptions opts;
    opts.port = static_cast<uint16_t>(e.master_port);
    opts.isServer = e.rank == 0 && !e.agent_store;
    opts.numWorkers = e.agent_store ? std::nullopt : std::optional<std::size_t>(static_cast<size_t>(e.world_size));
    opts.waitWorkers = false;
    opts.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
    try {
      store_ = c10::make_intrusive<c10d::TCPStore>(e.master_addr, opts);
    } catch (const std::exception& ex) {
      throw IoError(Where(), "rank " + std::to_string(e.rank) + ": cannot reach the c10d store at " + e.master_addr + ":" +
                                 std::to_string(e.master_port) + ": " + first_line(ex.what()));
    }
    prefix_ = "dcpctl/" + std::to_string(e.restart_count) + "/";
  }

  // The process hosting the store must outlive every reader of the final outcome: the others
  // say goodbye, and the host waits (briefly) for them before closing the store.
  ~StoreGroup() override {
    try {
      if (rank() != 0) {
        store_->set(prefix_ + "bye/" + std::to_string(rank()), bytes_of("bye"));
      } else if (!env_.agent_store) {
        std::vector<std::string> keys;
        for (int r = 1; r < size(); ++r) keys.push_back(prefix_ + "bye/" + std::to_string(r));
        store_->wait(keys, std::chrono::milliseconds(std::min<int64_t>(10000, timeout_.count() * 1000)));
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
      announce("agree/" + what, bad.empty() ? "" : "rank(s) " + bad + " were given a different command or see a different checkpoint than rank 0");
    }
    await_impl("agree/" + what, true);
  }

  void publish(const std::string& key, const std::string& value) override { set(key, value); }
  std::string fetch(const std::string& key) override { return get(key, -1); }

  void report(const std::string& phase, const std::string& error) override {
    set("status/" + phase + "/" + std::to_string(rank()), error.empty() ? "ok" : "error: " + error);
  }

  void collect(const std::string& phase) override {
    for (int r = 1; r < size(); ++r) {
      std::string s = get("status/" + phase + "/" + std::to_string(r), r);
      if (s != "ok") throw Error(Where(), "rank " + std::to_string(r) + " failed: " + s.substr(s.rfind("error: ", 0) == 0 ? 7 : 0));
    }
  }

  void announce(const std::string& phase, const std::string& error) override {
    set("outcome/" + phase, error.empty() ? "ok" : error);
  }

  void await(const std::string& phase) override { await_impl(phase, false); }

 private:
  static std::string first_line(std::string s) {
    if (auto nl = s.find('\n'); nl != std::string::npos) s.resize(nl);
    return s;
  }

  void await_impl(const std::string& phase, bool usage) {
    if (rank() == 0 && phase.rfind("agree/", 0) != 0) return;
    std::string s = get("outcome/" + phase, 0);
    if (s == "ok") return;
    if (usage) throw UsageError(Where(), s);
    throw Error(Where(), "rank 0 ended the run: " + s);
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
  c10::intrusive_ptr<c10d::TCPStore> store_;
  std::string prefix_;
};

}  // namespace

std::optional<LaunchEnv> LaunchEnv::from_environment() {
  LaunchEnv e;
  e.world_size = env_int("WORLD_SIZE", 1);
  if (e.world_size <= 1) return std::nullopt;
  e.rank = env_int("RANK", -1);
  if (e.rank < 0 || e.rank >= e.world_size)
    throw UsageError(Where(), "WORLD_SIZE=" + std::to_string(e.world_size) + " but RANK is missing or out of range");
  e.local_rank = env_int("LOCAL_RANK", 0);
  auto addr = env("MASTER_ADDR");
  if (!addr) throw UsageError(Where(), "WORLD_SIZE > 1 but MASTER_ADDR is not set (launch with torchrun)");
  e.master_addr = *addr;
  e.master_port = env_int("MASTER_PORT", -1);
  if (e.master_port <= 0 || e.master_port > 65535) throw UsageError(Where(), "WORLD_SIZE > 1 but MASTER_PORT is missing or invalid");
  auto agent = env("TORCHELASTIC_USE_AGENT_STORE");
  e.agent_store = agent && (*agent == "True" || *agent == "true" || *agent == "1");
  e.restart_count = env_int("TORCHELASTIC_RESTART_COUNT", 0);
  return e;
}

std::unique_ptr<Group> connect_group(const LaunchEnv& env, std::chrono::seconds timeout) {
  return std::make_unique<StoreGroup>(env, timeout);
}

}  // namespace dcpctl
