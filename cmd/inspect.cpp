// dcpctl inspect: what a checkpoint holds and how it is sharded, from `.metadata` alone
// (--value reads the one item asked for).
#include <algorithm>
#include <iostream>
#include <map>
#include <set>

#include "cmd/format.h"
#include "cmd/subcommands.h"
#include "item/chunk_source.h"
#include "item/item_reader.h"
#include "meta/checkpoint.h"
#include "meta/geometry.h"
#include "pickle/repr.h"
#include "report/inspect.h"
#include "util/numeric.h"
#include "util/sha256.h"

namespace dcpctl::cli {

using nlohmann::json;

struct InspectCliOptions {
  std::string checkpoint;
  bool json = false;
  bool flat = false;
  bool chunks = false;
  std::vector<std::string> filters;
  std::string value_key;
  uint64_t max_values = 10000;
};

namespace {

// A tree of keys grouped by their planner_data path (or by dots when there is none).
struct Node {
  std::string name;
  std::vector<std::unique_ptr<Node>> children;
  std::map<std::string, Node*> index;
  const json* item = nullptr;
  uint64_t tensors = 0, others = 0, bytes = 0;
  Node* child(const std::string& n) {
    auto it = index.find(n);
    if (it != index.end()) return it->second;
    children.push_back(std::make_unique<Node>());
    children.back()->name = n;
    index[n] = children.back().get();
    return children.back().get();
  }
};

std::vector<std::string> key_path(const json& item) {
  std::vector<std::string> parts;
  if (item.contains("path")) {
    for (const auto& p : item["path"])
      parts.push_back(p.is_string() ? p.get<std::string>() : std::to_string(p.get<int64_t>()));
    if (!parts.empty()) return parts;
  }
  const std::string& k = item["key"].get_ref<const std::string&>();
  size_t start = 0;
  while (true) {
    size_t dot = k.find('.', start);
    parts.push_back(k.substr(start, dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return parts;
}

std::string sharding_cell(const json& it) {
  if (it["kind"] == "bytes") return it["file"].is_null() ? "(no storage)" : it["file"].get<std::string>();
  std::string s = it["sharding"].get<std::string>();
  if (!it["complete"].get<bool>()) s += "  INCOMPLETE";
  return s;
}

void print_chunks(const json& it, const std::string& indent) {
  if (!it.contains("chunk_list")) return;
  size_t i = 0;
  for (const auto& c : it["chunk_list"]) {
    std::cout << indent << "chunk " << i++ << "  offsets " << dims_str(c["offsets"].get<std::vector<int64_t>>())
              << " sizes " << dims_str(c["sizes"].get<std::vector<int64_t>>()) << "  ";
    if (c["file"].is_null())
      std::cout << "(no storage entry)";
    else
      std::cout << c["file"].get<std::string>() << " @" << c["offset"].get<uint64_t>() << " +"
                << c["length"].get<uint64_t>();
    if (c.contains("transforms")) std::cout << " " << c["transforms"].dump();
    std::cout << "\n";
  }
}

void render_metadata(const json& r) {
  const json& m = r["metadata"];
  std::string ver = m["version"].is_null() ? "no format version" : "format version " + m["version"].get<std::string>();
  std::string layout = r["layout"].get<std::string>();
  if (layout != "dcp") std::cout << "Layout      " << layout << "\n";
  if (layout == "gguf") {
    const json& keys = r["gguf"]["keys"];
    auto key = [&](const char* k) { return keys.contains(k) ? keys[k].get<std::string>() : std::string("(none)"); };
    std::cout << "Metadata    " << r["gguf"]["format"].get<std::string>() << " header, "
              << human_bytes(m["bytes"].get<uint64_t>()) << ", " << keys.size() << " keys; general.architecture "
              << key("general.architecture") << ", general.name " << key("general.name") << "\n";
  } else if (layout.rfind("hf-", 0) == 0 || layout == "torch-save-ranks" || layout == "torch-checkpointing") {
    std::cout << "Metadata    " << m["class"].get<std::string>() << ", " << human_bytes(m["bytes"].get<uint64_t>())
              << ", " << m["sources"].size() << " file(s)\n";
  } else {
    std::string name = m["path"].get<std::string>();
    name = name.substr(name.find_last_of('/') + 1);
    if (m["sources"].size() > 1) name = std::to_string(m["sources"].size()) + " rank-local __R.metadata";
    std::cout << "Metadata    " << name << ", " << human_bytes(m["bytes"].get<uint64_t>()) << ", pickle protocol "
              << m["pickle_protocol"].get<int>() << ", " << ver << "; written by torch "
              << m["writer_releases"].get<std::string>() << "\n";
  }
  if (!m["save_id"].is_null()) std::cout << "Save id     " << m["save_id"].get<std::string>() << "\n";
  // Said only when it excludes a release users still run (--json always has it).
  if (m["strided_tensors"].get<uint64_t>() > 0) {
    const json& lb = m["loadable_by"];
    std::cout << "Loads in    torch " << lb["oldest"].get<std::string>()
              << " or newer: " << lb["reason"].get<std::string>()
              << "; `dcpctl compat` writes a copy older torch loads\n";
  }
}

void render_framework(const json& f) {
  std::cout << "Framework   " << f["name"].get<std::string>();
  if (f.contains("backend")) {
    std::cout << ", metadata.json: backend " << f["backend"].get<std::string>();
    if (!f["backend_version"].is_null()) std::cout << " version " << f["backend_version"].get<int64_t>();
    if (f["files"].size() > 1) std::cout << "; integrity.json (verify checks it)";
  } else {
    std::cout << ", meta.pt: the non-tensor state (consolidate -o FILE.pt merges it)";
  }
  std::cout << "\n";
}

void render_quantization(const json& q) {
  std::cout << "Quantized   ";
  if (q["scaled_weights"].get<uint64_t>() > 0) {
    std::cout << q["scaled_weights"].get<uint64_t>() << " block-scaled float8 weights (each with a _scale_inv";
    if (!q["block"].is_null())
      std::cout << ", " << q["block"][0].get<int64_t>() << "x" << q["block"][1].get<int64_t>() << " blocks";
    std::cout << ")" << (q.value("mxfp4", uint64_t{0}) > 0 ? ", " : "");
  }
  if (q.value("mxfp4", uint64_t{0}) > 0)
    std::cout << q["mxfp4"].get<uint64_t>() << " MXFP4 weights (_blocks with their _scales)";
  if (q["scaled_weights"].get<uint64_t>() > 0 || q.value("mxfp4", uint64_t{0}) > 0)
    std::cout << ": --dtype bf16 (or fp32) dequantizes them as torch's QuantizedHuggingFaceStorageReader does\n";
  else {
    std::string counts;
    const json per_codec = q.value("codecs", json::object());  // held: items() of a temporary would dangle
    for (const auto& [name, n] : per_codec.items())
      counts += (counts.empty() ? "" : ", ") + std::to_string(n.get<uint64_t>()) + " " + name;
    std::cout << counts
              << " weights beside their scales: --dtype bf16 (or fp32) dequantizes them as their producer does\n";
  }
  if (!q.value("scheme", json()).is_null())
    std::cout << "            config.json: quant_method " << q["scheme"].get<std::string>() << "\n";
}

void render_lora(const json& l) {
  for (const json& a : l["adapters"]) {
    std::cout << "LoRA        adapter "
              << (a["name"].is_null() ? std::string("(unnamed)") : a["name"].get<std::string>()) << ": "
              << a["modules"].get<uint64_t>() << " modules (";
    std::string targets;
    for (const json& t : a["targets"]) targets += (targets.empty() ? "" : ", ") + t.get<std::string>();
    for (const json& t : a.value("target_parameters", json::array()))
      targets += (targets.empty() ? "" : ", ") + t.get<std::string>();
    std::string ranks;
    for (const json& k : a["ranks"]) ranks += (ranks.empty() ? "" : "/") + std::to_string(k.get<int64_t>());
    std::cout << targets << "), rank " << ranks << (a["dora"].get<bool>() ? ", DoRA" : "");
    if (a.contains("experts") && !a["experts"].empty())
      std::cout << " per expert (" << a["experts"][0].get<int64_t>() << " experts, lora_A [r*E, in])";
    if (!a["modules_to_save"].empty()) std::cout << ", " << a["modules_to_save"].size() << " module(s) trained whole";
    std::cout << "\n";
  }
  std::cout << "            " << (l["base_model"].get<bool>() ? "with its base model; " : "adapter only; ")
            << l["hint"].get<std::string>() << "\n";
}

// "rank 0", "ranks 0-7" or "ranks 0,2,5".
std::string ranks_text(const std::vector<int>& rv) {
  if (rv.empty()) return "";
  const bool dense = rv.back() - rv.front() + 1 == static_cast<int>(rv.size());
  if (dense)
    return rv.size() == 1 ? "rank " + std::to_string(rv[0])
                          : "ranks " + std::to_string(rv.front()) + "-" + std::to_string(rv.back());
  std::string ranks = "ranks ";
  for (size_t i = 0; i < rv.size(); ++i) ranks += (i ? "," : "") + std::to_string(rv[i]);
  return ranks;
}

void render_contents(const json& r) {
  const json& s = r["summary"];
  const std::string ranks = ranks_text(s["ranks"].get<std::vector<int>>());
  std::cout << "Files       " << s["files"].get<uint64_t>() << " data file"
            << (s["files"].get<uint64_t>() == 1 ? "" : "s") << ", " << human_bytes(s["data_bytes"].get<uint64_t>())
            << (ranks.empty() ? "" : ", " + ranks);
  if (s["files_missing"].get<uint64_t>()) std::cout << ", " << s["files_missing"].get<uint64_t>() << " MISSING";
  std::cout << "\n";
  std::cout << "Contents    " << s["tensors"].get<uint64_t>() << " tensors in " << s["chunks"].get<uint64_t>()
            << " chunks (" << human_bytes(s["tensor_bytes"].get<uint64_t>()) << "), "
            << s["bytes_items"].get<uint64_t>() << " non-tensor items\n";
  std::vector<std::pair<uint64_t, std::string>> dts;
  for (const auto& [name, v] : s["dtypes"].items()) dts.emplace_back(v["bytes"].get<uint64_t>(), name);
  std::sort(dts.rbegin(), dts.rend());
  std::string dl;
  for (const auto& [b, name] : dts) {
    uint64_t n = s["dtypes"][name]["tensors"].get<uint64_t>();
    dl += (dl.empty() ? "" : ", ") + name + " " + human_bytes(b) + " (" + std::to_string(n) + ")";
  }
  if (!dl.empty()) std::cout << "Dtypes      " << dl << "\n";
  size_t np = r["problems"].size();
  std::cout << "Complete    "
            << (s["complete"].get<bool>() && np == 0
                    ? "yes"
                    : "NO (" + std::to_string(np) + " problem" + (np == 1 ? "" : "s") + ", see below)")
            << "\n";
}

void render_summary(const json& r) {
  const json& m = r["metadata"];
  std::cout << "Checkpoint  " << r["checkpoint"].get<std::string>() << "\n";
  render_metadata(r);
  if (const json& f = r["framework"]; !f.is_null()) render_framework(f);
  if (const json& q = r["quantization"]; !q.is_null()) render_quantization(q);
  if (const json& l = r["lora"]; !l.is_null()) render_lora(l);
  render_contents(r);
  for (const auto& sh : r["shared"]) std::cout << "Shared      " << sh["message"].get<std::string>() << "\n";
  if (!m["unknown_globals"].empty()) {
    std::cout << "Note        .metadata names classes dcpctl does not know (shown, never run):";
    for (const auto& g : m["unknown_globals"]) std::cout << " " << g.get<std::string>();
    std::cout << "\n";
  }
}

void render_flat(const json& r) {
  size_t w = 3;
  for (const auto& it : r["items"]) w = std::max(w, it["key"].get<std::string>().size());
  w = std::min<size_t>(w + 2, 80);
  std::cout << "\n" << pad("KEY", w) << pad("DTYPE", 14) << pad("SHAPE", 18) << pad("BYTES", 11) << "SHARDING\n";
  for (const auto& it : r["items"]) {
    bool t = it["kind"] == "tensor";
    std::cout << pad(it["key"].get<std::string>(), w) << pad(t ? it["dtype"].get<std::string>() : "(object)", 14)
              << pad(t ? dims_str(it["shape"].get<std::vector<int64_t>>()) : "", 18)
              << pad(human_bytes(t ? it["bytes"].get<uint64_t>() : it["length"].get<uint64_t>()), 11)
              << sharding_cell(it) << "\n";
    print_chunks(it, "    ");
  }
}

void aggregate(Node& n) {
  if (n.item) {
    bool t = (*n.item)["kind"] == "tensor";
    n.tensors = t;
    n.others = !t;
    n.bytes = t ? (*n.item)["bytes"].get<uint64_t>() : 0;
  }
  for (auto& c : n.children) {
    aggregate(*c);
    n.tensors += c->tensors;
    n.others += c->others;
    n.bytes += c->bytes;
  }
}

void render_node(const Node& n, size_t depth, size_t w) {
  std::string indent(2 * depth, ' ');
  if (n.item) {
    const json& it = *n.item;
    bool t = it["kind"] == "tensor";
    std::cout << pad(indent + n.name, w) << pad(t ? it["dtype"].get<std::string>() : "(object)", 14)
              << pad(t ? dims_str(it["shape"].get<std::vector<int64_t>>()) : "", 18)
              << pad(human_bytes(t ? it["bytes"].get<uint64_t>() : it["length"].get<uint64_t>()), 11)
              << sharding_cell(it) << "\n";
    print_chunks(it, indent + "    ");
  }
  if (!n.children.empty() && !n.name.empty()) {
    std::string what = std::to_string(n.tensors) + " tensor" + (n.tensors == 1 ? "" : "s");
    if (n.others) what += ", " + std::to_string(n.others) + " other";
    if (!n.item)
      std::cout << pad(indent + n.name + "/", w) << pad("", 14) << pad("", 18) << pad(human_bytes(n.bytes), 11) << what
                << "\n";
  }
  for (const auto& c : n.children) render_node(*c, n.name.empty() ? depth : depth + 1, w);
}

void render_tree(const json& r) {
  Node root;
  size_t w = 3;
  for (const auto& it : r["items"]) {
    Node* n = &root;
    auto parts = key_path(it);
    for (size_t i = 0; i < parts.size(); ++i) {
      n = n->child(parts[i]);
      w = std::max(w, 2 * i + parts[i].size() + 1);
    }
    n->item = &it;
  }
  aggregate(root);
  w = std::min<size_t>(w + 2, 80);
  std::cout << "\n" << pad("KEY", w) << pad("DTYPE", 14) << pad("SHAPE", 18) << pad("BYTES", 11) << "SHARDING\n";
  render_node(root, 0, w);
}

void render_problems(const json& r) {
  if (r["problems"].empty()) return;
  std::cout << "\nProblems:\n";
  for (const auto& p : r["problems"]) {
    std::string key = p["key"].get<std::string>();
    std::cout << "  [" << p["code"].get<std::string>() << "] " << (key.empty() ? "" : key + ": ")
              << p["message"].get<std::string>() << "\n";
  }
}

// torch-like nested rendering of a small tensor.
void nested(std::string& out, const std::vector<int64_t>& shape, size_t dim, const uint8_t*& p, DType d) {
  if (dim == shape.size()) {
    out += format_element(d, p);
    p += itemsize(d);
    return;
  }
  out += "[";
  for (int64_t i = 0; i < shape[dim]; ++i) {
    if (i) out += ", ";
    nested(out, shape, dim + 1, p, d);
  }
  out += "]";
}

json nested_json(const std::vector<int64_t>& shape, size_t dim, const uint8_t*& p, DType d) {
  if (dim == shape.size()) {
    std::string s = format_element(d, p);
    p += itemsize(d);
    if (d == DType::Bool) return s == "True";
    if (info(d).complex || s == "nan" || s == "inf" || s == "-inf") return s;
    if (!info(d).floating) return json::parse(s);
    return std::stod(s);
  }
  json a = json::array();
  for (int64_t i = 0; i < shape[dim]; ++i) a.push_back(nested_json(shape, dim + 1, p, d));
  return a;
}

int show_value(const Checkpoint& ck, const InspectCliOptions& o) {
  ItemReader reader(ck);
  for (const auto& b : ck.md.bytes) {
    if (b.fqn != o.value_key) continue;
    auto tree = reader.read_bytes(b);
    std::string rp = pickle::repr(tree->root, 1 << 20);
    if (o.json) {
      json j = {{"schema_version", 1}, {"key", b.fqn}, {"kind", "bytes"}, {"repr", rp}};
      json v;
      j["value"] = pickle::to_json(tree->root, v) ? v : json(nullptr);
      std::cout << j.dump(2) << "\n";
    } else {
      std::cout << rp << "\n";
    }
    return 0;
  }
  const TensorMeta* t = ck.md.find_tensor(o.value_key);
  if (!t)
    throw UsageError(Where(ck.metadata_path, std::nullopt, o.value_key),
                     "no such key in the checkpoint (see dcpctl inspect --flat)");
  if (!t->dtype)
    throw UnsupportedError(Where(ck.metadata_path, std::nullopt, t->fqn),
                           "dtype " + t->dtype_name + " cannot be shown");
  if (t->numel() > o.max_values)
    throw UsageError(Where(ck.metadata_path, std::nullopt, t->fqn),
                     "tensor has " + std::to_string(t->numel()) + " elements; --value shows at most " +
                         std::to_string(o.max_values) + " (raise it with --max-values)");
  Coverage cov = check_coverage(*t, 1);
  if (!cov.exact)
    throw FormatError(Where(ck.metadata_path, std::nullopt, t->fqn), "tensor is not fully covered by its chunks");
  std::vector<uint8_t> full(t->nbytes());
  LocalChunks local(reader);
  read_full_tensor(local, *t, full.data());
  const uint8_t* p = full.data();
  if (o.json) {
    Sha256 h;
    h.update(full.data(), full.size());
    json j = {{"schema_version", 1},    {"key", t->fqn},     {"kind", "tensor"},
              {"dtype", t->dtype_name}, {"shape", t->shape}, {"sha256", h.hex()}};
    j["values"] = nested_json(t->shape, 0, p, *t->dtype);
    std::cout << j.dump(2) << "\n";
  } else {
    std::string s = "tensor(";
    nested(s, t->shape, 0, p, *t->dtype);
    s += ", dtype=torch." + t->dtype_name + ")";
    std::cout << s << "\n";
  }
  return 0;
}

}  // namespace

static int inspect(const InspectCliOptions& o) {
  Checkpoint ck = open_checkpoint(o.checkpoint);
  if (!o.value_key.empty()) return show_value(ck, o);
  InspectOptions io;
  io.filters = o.filters;
  io.chunks = o.chunks;
  json r = inspect_report(ck, io);
  if (!o.filters.empty() && r["items"].empty())
    throw UsageError(Where(o.checkpoint), "no key matches the --filter glob(s)");
  if (o.json) {
    add_s3_transfer(r);
    std::cout << r.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
    return 0;
  }
  render_summary(r);
  if (o.flat)
    render_flat(r);
  else
    render_tree(r);
  render_problems(r);
  return 0;
}

int run_inspect(const InspectCliOptions& o) {
  if (!o.json) return inspect(o);
  try {
    return inspect(o);
  } catch (const Error& e) {  // a script asked for JSON: it gets a JSON document, failures too
    static const char* kKinds[] = {"ok", "failure", "usage", "invalid", "io", "unsupported"};
    int code = static_cast<int>(e.exit_code());
    json err = {{"exit_code", code},      {"kind", kKinds[code]},
                {"file", e.where().file}, {"offset", e.where().offset ? json(*e.where().offset) : json(nullptr)},
                {"key", e.where().key},   {"message", e.detail()}};
    std::cout << json{{"schema_version", 1}, {"checkpoint", o.checkpoint}, {"error", err}}.dump(
                     2, ' ', false, json::error_handler_t::replace)
              << "\n";
    throw;
  }
}

void setup_inspect(CLI::App& parent, RunFn& run) {
  auto o = std::make_shared<InspectCliOptions>();
  auto* sub =
      parent.add_subcommand("inspect", "Show what a checkpoint holds, how it is sharded and whether it is complete");
  sub->add_option(
         "checkpoint", o->checkpoint,
         "Checkpoint: a DCP directory (any layout), an HF safetensors directory, a .safetensors or a .gguf file")
      ->required()
      ->type_name("DIR");
  sub->add_flag("--json", o->json, "Print the report as JSON (schema_version 1) on stdout");
  sub->add_flag("--flat", o->flat, "One row per key instead of a tree grouped by prefix");
  sub->add_flag("--chunks", o->chunks, "List every chunk with its offsets, sizes, file, offset and length");
  sub->add_option("--filter", o->filters, "Only keys matching this shell glob (fnmatch, case-sensitive; repeatable)")
      ->type_name("GLOB");
  sub->add_option("--value", o->value_key, "Print one non-tensor value, or a small tensor's elements")
      ->type_name("KEY");
  sub->add_option("--max-values", o->max_values, "Largest tensor --value prints, in elements")
      ->capture_default_str()
      ->type_name("N");
  sub->callback([&run, o] { run = [o] { return run_inspect(*o); }; });
}

}  // namespace dcpctl::cli
