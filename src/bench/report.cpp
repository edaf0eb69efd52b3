#include "bench/report.h"

#include <algorithm>
#include <cstdio>

#include "bench/sizes.h"

namespace dcpctl::bench {

using nlohmann::json;

namespace {

json opt(const std::optional<double>& v) {
  return v ? json(*v) : json(nullptr);
}
json opt(const std::optional<int>& v) {
  return v ? json(*v) : json(nullptr);
}

json summary_json(const Summary& s) {
  if (s.n == 0) return nullptr;
  return {{"n", s.n}, {"median", s.median}, {"min", s.min}, {"max", s.max}, {"mean", s.mean}};
}

std::string version_str(int v) {
  if (v <= 0) return "none";
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

json row_json(const Row& row) {
  json j = {{"mode", row.mode},
            {"direction", row.direction},
            {"memory", row.memory},
            {"bytes", row.bytes},
            {"copies", row.copies},
            {"streams", row.streams},
            {"chunk_bytes", row.chunk_bytes},
            {"timing", row.timing.empty() ? json(nullptr) : json(row.timing)},
            {"iters", row.iters},
            {"warmup", row.warmup},
            {"seconds", summary_json(row.seconds)},
            {"host_bytes", row.host_bytes},
            {"host_bytes_locked_between_saves", row.host_bytes_locked_between_saves},
            {"verified", row.verified ? json(*row.verified) : json(nullptr)},
            {"status", row.status},
            {"reason", row.reason}};
  const RateSummary g = rates(row.bytes, row.seconds);
  j["gbps"] = row.seconds.n ? json{{"median", opt(g.median)}, {"min", opt(g.min)}, {"max", opt(g.max)}} : json(nullptr);
  j["pin_seconds"] = row.pin_seconds ? summary_json(*row.pin_seconds) : json(nullptr);
  j["pin_seconds_per_gib"] =
      row.pin_seconds && row.pin_seconds->n ? opt(seconds_per_gib(row.bytes, row.pin_seconds->median)) : json(nullptr);
  return j;
}

std::string fixed(double v, int decimals) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", decimals, v);
  return b;
}

std::string rate_str(const std::optional<double>& v) {
  if (!v) return "-";
  return fixed(*v, *v >= 100 ? 0 : *v >= 10 ? 1 : 2);
}

std::string pad(const std::string& s, size_t w) {
  return s.size() >= w ? s + " " : s + std::string(w - s.size(), ' ');
}
std::string rpad(const std::string& s, size_t w) {
  return s.size() >= w ? s + " " : std::string(w - s.size(), ' ') + s + " ";
}

}  // namespace

std::string format_seconds(double s) {
  auto three = [](double v, const char* unit) {
    int dec = v >= 100 ? 0 : v >= 10 ? 1 : 2;
    return fixed(v, dec) + " " + unit;
  };
  if (s < 1e-3) return three(s * 1e6, "us");
  if (s < 1) return three(s * 1e3, "ms");
  return three(s, "s");
}

json staging_json(const StagingReport& r) {
  json j;
  j["schema_version"] = 1;
  j["benchmark"] = "staging";
  j["host_only"] = r.host_only;
  j["config"] = {{"sizes", r.sizes},
                 {"modes", r.modes},
                 {"iters", r.iters},
                 {"warmup", r.warmup},
                 {"streams", r.streams},
                 {"chunk_bytes", r.chunk},
                 {"write_to", r.write_to.empty() ? json(nullptr) : json(r.write_to)},
                 {"fsync", r.fsync}};
  if (r.checkpoint) {
    const CheckpointSource& c = *r.checkpoint;
    j["checkpoint"] = {{"path", c.path},   {"rank", c.rank},       {"chunks", c.chunks}, {"tensors", c.tensors},
                       {"bytes", c.bytes}, {"span_bytes", c.span}, {"ranks", c.ranks}};
  } else {
    j["checkpoint"] = nullptr;
  }
  j["cuda"] = {{"compiled", r.cuda.compiled},
               {"gate", r.cuda.compiled ? json(r.cuda.kernels ? "spin-kernel" : "host-function") : json(nullptr)},
               {"toolkit", r.cuda.compiled ? json(r.cuda.toolkit) : json(nullptr)},
               {"runtime_version", r.cuda.runtime_version ? json(version_str(r.cuda.runtime_version)) : json(nullptr)},
               {"driver_version", r.cuda.driver_version ? json(version_str(r.cuda.driver_version)) : json(nullptr)},
               {"device_count", r.cuda.device_count},
               {"usable", r.cuda.usable},
               {"reason", r.cuda.reason}};
  if (r.device) {
    const DeviceInfo& d = *r.device;
    j["device"] = {{"index", d.index},
                   {"name", d.name},
                   {"pci_bus_id", d.pci_bus_id},
                   {"memory_bytes", d.memory_bytes},
                   {"compute_capability", std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor)},
                   {"copy_engines", d.copy_engines}};
  } else {
    j["device"] = nullptr;
  }
  if (r.pcie && r.pcie->known()) {
    const PcieLink& p = *r.pcie;
    j["pcie"] = {{"bus_id", p.bus_id},
                 {"speed_gts", opt(p.speed_gts)},
                 {"width", opt(p.width)},
                 {"max_speed_gts", opt(p.max_speed_gts)},
                 {"max_width", opt(p.max_width)},
                 {"generation", opt(p.generation())},
                 {"theoretical_gbps", opt(p.theoretical_gbps())},
                 {"numa_node", opt(p.numa_node)}};
  } else {
    j["pcie"] = nullptr;
  }
  j["host"] = {{"cpu_threads", r.host.cpu_threads},
               {"page_size", r.host.page_size},
               {"memory_bytes", r.host.memory_bytes},
               {"memlock_limit_bytes", r.host.memlock_limit ? json(*r.host.memlock_limit) : json(nullptr)},
               {"memlock_exempt", r.host.memlock_exempt},
               {"pinned_memory", r.pinned_memory}};
  j["results"] = json::array();
  for (const Row& row : r.rows) j["results"].push_back(row_json(row));
  j["notes"] = r.notes;
  return j;
}

std::string staging_table(const StagingReport& r) {
  std::string out;
  const bool d2h = !r.host_only;
  out += std::string("Staging benchmark: ") + (d2h ? "GPU -> host" : "host side only (--host-only)") + ", " +
         std::to_string(r.iters) + " timed iteration" + (r.iters == 1 ? "" : "s") + " after " +
         std::to_string(r.warmup) + " warm-up, " + std::to_string(r.streams) + (d2h ? " stream" : " thread") +
         (r.streams == 1 ? "" : "s") + "\n";
  if (r.device) {
    const DeviceInfo& d = *r.device;
    out += "GPU     " + d.name + " (device " + std::to_string(d.index) +
           (d.pci_bus_id.empty() ? "" : ", " + d.pci_bus_id) + ", " + format_size(d.memory_bytes) + ", sm_" +
           std::to_string(d.cc_major) + std::to_string(d.cc_minor) + ", " + std::to_string(d.copy_engines) +
           " copy engine" + (d.copy_engines == 1 ? "" : "s") + ")\n";
    if (r.pcie && r.pcie->known()) {
      const PcieLink& p = *r.pcie;
      std::string s = "PCIe    ";
      s += p.speed_gts ? fixed(*p.speed_gts, 1) + " GT/s" : "? GT/s";
      s += p.width ? " x" + std::to_string(*p.width) : "";
      if (auto g = p.generation()) s += " (Gen" + std::to_string(*g) + ")";
      if (auto t = p.theoretical_gbps()) s += ", " + fixed(*t, 1) + " GB/s per direction in theory";
      if (p.max_speed_gts || p.max_width)
        s += "; max " + (p.max_speed_gts ? fixed(*p.max_speed_gts, 1) + " GT/s" : std::string("?")) +
             (p.max_width ? " x" + std::to_string(*p.max_width) : "");
      if (p.numa_node) s += "; NUMA node " + std::to_string(*p.numa_node);
      out += s + "\n";
    } else {
      out +=
          "PCIe    link not readable from /sys/bus/pci/devices/" + (r.pcie ? r.pcie->bus_id : std::string("?")) + "\n";
    }
  }
  out += "CUDA    ";
  if (!r.cuda.compiled)
    out += "not compiled in";
  else
    out += "toolkit " + r.cuda.toolkit + ", runtime " + version_str(r.cuda.runtime_version) + ", driver " +
           version_str(r.cuda.driver_version) + (r.cuda.usable ? "" : "; not usable: " + r.cuda.reason);
  out += "\n";
  out += "Host    " + std::to_string(r.host.cpu_threads) + " CPU threads, " + format_size(r.host.memory_bytes) +
         " RAM, mlock limit " + (r.host.memlock_limit ? format_size(*r.host.memlock_limit) : std::string("unlimited")) +
         (r.host.memlock_exempt && r.host.memlock_limit ? " (not enforced: CAP_IPC_LOCK)" : "") + "\n";
  if (r.checkpoint)
    out += "Ckpt    " + r.checkpoint->path + ", rank " + std::to_string(r.checkpoint->rank) + ": " +
           std::to_string(r.checkpoint->chunks) + " tensor chunks, " + format_size(r.checkpoint->bytes) + "\n";

  struct Col {
    const char* name;
    size_t width;
    bool right;
  };
  const Col cols[] = {{"MODE", 12, false},   {"SIZE", 10, false},      {"COPY", 7, false},    {"COPIES", 7, true},
                      {"TIMING", 12, false}, {"MEDIAN", 10, true},     {"MIN", 10, true},     {"MAX", 10, true},
                      {"GB/s", 8, true},     {"(MIN-MAX)", 14, false}, {"PIN/GiB", 10, true}, {"CHECK", 6, false}};
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s;
    for (size_t i = 0; i < cells.size(); ++i)
      s += cols[i].right ? rpad(cells[i], cols[i].width) : pad(cells[i], cols[i].width);
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s + "\n";
  };
  std::vector<std::string> head;
  for (const Col& c : cols) head.push_back(c.name);
  out += "\n" + line(head);
  std::vector<std::string> memory_lines;
  for (const Row& row : r.rows) {
    if (row.status == "skipped") {
      out += line({row.mode, row.label, row.direction, "", "skipped: " + row.reason});
      continue;
    }
    const RateSummary g = rates(row.bytes, row.seconds);
    std::string pin = "-";
    if (row.pin_seconds && row.pin_seconds->n)
      if (auto s = seconds_per_gib(row.bytes, row.pin_seconds->median)) pin = format_seconds(*s);
    std::string check = row.verified ? (*row.verified ? "ok" : "WRONG") : "-";
    out += line({row.mode, row.label, row.direction, std::to_string(row.copies), row.timing,
                 format_seconds(row.seconds.median), format_seconds(row.seconds.min), format_seconds(row.seconds.max),
                 rate_str(g.median), "(" + rate_str(g.min) + "-" + rate_str(g.max) + ")", pin, check});
    if (!row.reason.empty())
      out += "    " + std::string(row.status == "failed" ? "FAILED: " : "note: ") + row.reason + "\n";
  }

  // What each mode's destination was, once per mode.
  out += "\nMemory\n";
  std::vector<std::string> seen;
  for (const Row& row : r.rows) {
    if (row.status == "skipped" || std::find(seen.begin(), seen.end(), row.mode) != seen.end()) continue;
    seen.push_back(row.mode);
    out += "  " + pad(row.mode, 12) + row.memory + "\n";
  }
  if (!r.notes.empty()) {
    out += "\n";
    for (const std::string& n : r.notes) out += "Note: " + n + "\n";
  }
  out +=
      "\nGB/s = 10^9 bytes per second, from the median time (min-max from the slowest and fastest iteration); "
      "PIN/GiB = median cost of allocating or pinning, per GiB.\n";
  return out;
}

}  // namespace dcpctl::bench
