#include "cmd/format.h"

#include <cstdio>
#include <iostream>

#include "store/store.h"

namespace dcpctl::cli {

void add_s3_transfer(nlohmann::json& doc) {
  for (const store::ObjectStore* st : store::in_use()) {
    // Merged into what the write side put there for an object-storage output (part_size, part_buffers).
    nlohmann::json& s = doc[st->report_name()];
    if (!s.is_object()) s = nlohmann::json::object();
    s.update(st->report());
  }
}

std::string human_bytes(uint64_t n) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (n < 1024) return std::to_string(n) + " B";
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char b[32];
  std::snprintf(b, sizeof b, "%.1f %s", v, units[u]);
  return b;
}

std::string dims_str(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

std::string pad(const std::string& s, size_t width) {
  return s.size() >= width ? s + " " : s + std::string(width - s.size(), ' ');
}

void print_map_summary(const nlohmann::json& r) {
  if (r.contains("dequantized") && r["dequantized"].is_object()) {
    const auto& d = r["dequantized"];
    std::string what;
    if (d["weights"].get<uint64_t>() > 0)
      what = std::to_string(d["weights"].get<uint64_t>()) + " float8 weights with their " +
             std::to_string(d["block"][0].get<int64_t>()) + "x" + std::to_string(d["block"][1].get<int64_t>()) +
             " block scales (_scale_inv)";
    if (d.value("mxfp4", uint64_t{0}) > 0)
      what += (what.empty() ? "" : " and ") + std::to_string(d["mxfp4"].get<uint64_t>()) +
              " MXFP4 weights (_blocks with their _scales)";
    if (d.value("gguf", uint64_t{0}) > 0) {
      std::string types;
      for (const auto& [type, n] : d["types"].items())
        types += (types.empty() ? "" : ", ") + std::to_string(n.get<uint64_t>()) + " " + type;
      what += (what.empty() ? "" : " and ") + std::to_string(d["gguf"].get<uint64_t>()) + " GGUF block tensors (" +
              types + ")";
    }
    std::cerr << "dequantized " << what;
    if (!d["ignored_scales"].empty())
      std::cerr << "; left out " << d["ignored_scales"].size()
                << " _scale_inv of weights that are not float8 (first: " << d["ignored_scales"][0].get<std::string>()
                << ")";
    std::cerr << "\n";
  }
  if (!r.contains("map")) return;
  const auto& m = r["map"];
  std::cerr << "map " << m["name"].get<std::string>() << " (" << m["direction"].get<std::string>()
            << "): " << m["mapped"].get<uint64_t>() << " keys made " << m["outputs"].get<uint64_t>() << " tensors";
  if (!m["left_out"].empty())
    std::cerr << "; left out " << m["left_out"].size()
              << " keys no rule covers (first: " << m["left_out"][0].get<std::string>() << ")";
  if (!m["dropped"].empty()) {
    // Each by a rule of the map, with its reason; the first, as the reasons are few and long.
    std::cerr << "; dropped " << m["dropped"].size()
              << " by the map's rules (first: " << m["dropped"][0].get<std::string>();
    const std::string first = m["dropped"][0].get<std::string>();
    if (m.contains("drop_reasons") && m["drop_reasons"].contains(first))
      std::cerr << ": " << m["drop_reasons"][first].get<std::string>();
    std::cerr << ")";
  }
  if (m.contains("excluded") && !m["excluded"].empty())
    std::cerr << "; excluded " << m["excluded"].size()
              << " by --exclude (first: " << m["excluded"][0].get<std::string>() << ")";
  if (!m["missing"].empty())
    std::cerr << "; could not make " << m["missing"].size() << " (first: " << m["missing"][0].get<std::string>() << ")";
  // Written as zeros, from nothing the checkpoint holds: each with its rule's reason (the first).
  if (m.contains("zeros") && !m["zeros"].empty()) {
    const std::string first = m["zeros"][0].get<std::string>();
    std::cerr << "; wrote " << m["zeros"].size() << " as zeros, the checkpoint holding none (first: " << first;
    if (m.contains("zero_reasons") && m["zero_reasons"].contains(first) &&
        !m["zero_reasons"][first].get<std::string>().empty())
      std::cerr << ": " << m["zero_reasons"][first].get<std::string>();
    std::cerr << ")";
  }
  std::cerr << "\n";
  // Megatron -> Hugging Face: the checkpoint's training arguments against config.json.
  if (m.contains("args_checked") && m["args_checked"].is_array()) {
    if (m["args_from"].is_string())
      std::cerr << "config.json agrees with the checkpoint's Megatron-LM args on " << m["args_checked"].size()
                << " settings (" << m["args_from"].get<std::string>() << ")\n";
    else if (m["args_note"].is_string())
      std::cerr << "note: " << m["args_note"].get<std::string>() << "\n";
  }
  // torchtitan -> Hugging Face: the run's own job config against config.json.
  if (m.contains("trainer_config") && m["trainer_config"].is_object()) {
    const auto& t = m["trainer_config"];
    if (t["from"].is_string() && !t["checked"].empty())
      std::cerr << "config.json agrees with the torchtitan job config on " << t["checked"].size() << " settings ("
                << t["from"].get<std::string>() << ", model " << t["model"].get<std::string>() << " flavor "
                << t["flavor"].get<std::string>() << ")\n";
    if (t["note"].is_string()) std::cerr << "note: " << t["note"].get<std::string>() << "\n";
  }
  if (m.contains("megatron_args") && m["megatron_args"].is_object()) {
    const auto& a = m["megatron_args"];
    std::cerr << "args: Megatron-LM's argparse.Namespace of " << a["fields"].size()
              << " fields in the common state (from " << a["from"].get<std::string>() << ")";
    if (!a["set"].empty()) {
      std::cerr << "; over the file's:";
      for (const auto& [k, v] : a["set"].items())
        std::cerr << " " << k << " " << v["was"].dump() << " -> " << v["now"].dump();
    }
    std::cerr << "\n";
  }
  // Megatron -> Hugging Face: the padding rows of its vocabulary cut (check/megatron_vocab.h).
  if (m.contains("vocab") && m["vocab"].is_object() && m["vocab"].contains("rows_added")) {
    // Hugging Face -> Megatron-LM: padded as the run pads it (check/megatron_vocab.h).
    const auto& v = m["vocab"];
    std::cerr << "vocabulary: " << v["vocab_size"] << " rows padded to " << v["rows"] << " in " << v["tensors"].size()
              << " tensor(s), " << v["rows_added"] << " zero rows at the end (" << v["rule"].get<std::string>()
              << ")\n";
  } else if (m.contains("vocab") && m["vocab"].is_object()) {
    const auto& v = m["vocab"];
    std::cerr << "vocabulary: wrote the first " << v["vocab_size"] << " of " << v["rows"] << " rows of "
              << v["tensors"].size() << " tensor(s), dropping " << v["rows_dropped"] << " rows of Megatron's padding ("
              << v["rule"].get<std::string>() << "; " << v["rule_from"].get<std::string>() << ")\n";
  }
}

}  // namespace dcpctl::cli
