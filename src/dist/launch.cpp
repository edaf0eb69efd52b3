// The launch environment (torchrun's variables) and the core side of connect_group(): no
// LibTorch here; the process group itself comes from the LibTorch plugin (torchlib/).
#include <cstdlib>

#include "dist/group.h"
#include "torchlib/torchlib.h"
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
  if (e.master_port <= 0 || e.master_port > 65535)
    throw UsageError(Where(), "WORLD_SIZE > 1 but MASTER_PORT is missing or invalid");
  auto agent = env("TORCHELASTIC_USE_AGENT_STORE");
  e.agent_store = agent && (*agent == "True" || *agent == "true" || *agent == "1");
  e.restart_count = env_int("TORCHELASTIC_RESTART_COUNT", 0);
  return e;
}

std::unique_ptr<Group> connect_group(const LaunchEnv& env, std::chrono::seconds timeout, Backend backend) {
  return torchlib::api().connect_group(env, timeout, backend);
}

}  // namespace dcpctl
