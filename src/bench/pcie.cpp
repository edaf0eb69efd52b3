#include "bench/pcie.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>

namespace dcpctl::bench {
namespace {

std::optional<std::string> read_line(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  if (!f || !std::getline(f, s)) return std::nullopt;
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

std::optional<double> leading_number(const std::optional<std::string>& s) {
  if (!s || s->empty()) return std::nullopt;
  char* end = nullptr;
  double v = std::strtod(s->c_str(), &end);
  if (end == s->c_str() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::optional<int> int_value(const std::optional<std::string>& s) {
  auto v = leading_number(s);
  if (!v || *v != std::floor(*v) || std::fabs(*v) > 1e6) return std::nullopt;
  return static_cast<int>(*v);
}

}  // namespace

std::optional<int> PcieLink::generation() const {
  if (!speed_gts) return std::nullopt;
  static const double kRates[] = {2.5, 5.0, 8.0, 16.0, 32.0, 64.0, 128.0};
  for (int g = 0; g < 7; ++g)
    if (std::fabs(*speed_gts - kRates[g]) < 0.05) return g + 1;
  return std::nullopt;
}

std::optional<double> PcieLink::theoretical_gbps() const {
  if (!speed_gts || !width || *width <= 0) return std::nullopt;
  auto g = generation();
  if (!g) return std::nullopt;
  // Gen6 uses PAM4 with FLIT encoding (242/256); Gen3-5 128b/130b; Gen1-2 8b/10b.
  const double efficiency = *g <= 2 ? 0.8 : *g <= 5 ? 128.0 / 130.0 : 242.0 / 256.0;
  return *speed_gts * *width * efficiency / 8.0;
}

std::string normalize_bus_id(const std::string& id) {
  std::string s;
  for (char c : id) s += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  // "00000000:19:00.0" (CUDA's 8-digit domain) -> "0000:19:00.0" (sysfs).
  size_t colon = s.find(':');
  if (colon != std::string::npos && colon > 4 && s.find_first_not_of('0') >= colon - 4) s = s.substr(colon - 4);
  return s;
}

PcieLink read_pcie_link(const std::string& bus_id, const std::string& sysfs_root) {
  PcieLink l;
  l.bus_id = normalize_bus_id(bus_id);
  if (l.bus_id.empty() || l.bus_id.find('/') != std::string::npos || l.bus_id.find("..") != std::string::npos) return l;
  const std::string dir = sysfs_root + "/bus/pci/devices/" + l.bus_id + "/";
  l.speed_gts = leading_number(read_line(dir + "current_link_speed"));
  l.max_speed_gts = leading_number(read_line(dir + "max_link_speed"));
  l.width = int_value(read_line(dir + "current_link_width"));
  l.max_width = int_value(read_line(dir + "max_link_width"));
  l.numa_node = int_value(read_line(dir + "numa_node"));
  if (l.numa_node && *l.numa_node < 0) l.numa_node.reset();
  return l;
}

}  // namespace dcpctl::bench
