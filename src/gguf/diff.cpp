#include "gguf/diff.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "gguf/bound.h"
#include "gguf/model.h"
#include "gguf/rows.h"
#include "item/window.h"
#include "util/elements.h"
#include "util/numeric.h"
#include "util/parallel.h"
#include "write/assets.h"

namespace dcpctl {

namespace gguf_diff_impl {

using nlohmann::json;

json read_config(const Input& source, const std::string& assets_from) {
  Assets assets = find_assets(source.ck, assets_from);
  for (const Asset& a : assets.files) {
    if (a.name != "config.json") continue;
    std::string text;
    if (a.text) {
      text = *a.text;
    } else {
      std::ifstream in(a.source, std::ios::binary);
      if (!in) throw IoError(Where(a.source), "cannot read");
      std::ostringstream s;
      s << in.rdbuf();
      text = s.str();
    }
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object()) throw FormatError(Where(a.source), "not a JSON object");
    return j;
  }
  throw UsageError(Where(source.path),
                   "comparing with a GGUF needs the model's config.json (its architecture, head counts and experts), "
                   "beside the source or in --assets DIR; none was found");
}

// Bytes [0, t.nbytes()) of a tensor of the source (a key map's output assembled from its parts) or
// of a plain GGUF tensor.
void read_whole(Input& in, const TensorMeta& t, uint8_t* dst) {
  if (t.numel() == 0) return;
  WindowReader r(*in.reader, nullptr);
  Window w{0, static_cast<uint64_t>(t.numel())};
  r.expect(t, {w});
  std::vector<uint8_t> scratch(t.nbytes());
  r.fill(t, w, dst, scratch.data());
}

// The stored bytes of a GGUF tensor of any type (a block type has no torch dtype: read as bytes).
std::vector<uint8_t> read_stored(Input& file, const TensorMeta& t) {
  std::vector<uint8_t> out(t.storage.at(0).length);
  if (t.dtype) {
    read_whole(file, t, out.data());
    return out;
  }
  TensorMeta raw = t;
  raw.dtype = DType::UInt8;
  raw.dtype_name = "uint8";
  raw.shape = {static_cast<int64_t>(out.size())};
  raw.chunk_dims = {0, static_cast<int64_t>(out.size())};
  read_whole(file, raw, out.data());
  return out;
}

uint64_t numel_of(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

// compare_gguf over `threads` ranges of whole blocks at once, merged. util/parallel.h's workers:
// an exception of one range (compare_gguf's refusals) reaches the caller, as a serial run's would.
void compare_parallel(uint32_t type, const uint8_t* data, const float* x, uint64_t n, unsigned threads,
                      DiffAccumulator& acc) {
  const uint64_t block = gguf::bound_block(type), blocks = n / block;
  const uint64_t bytes_per_block = blocks ? static_cast<uint64_t>(gguf::tensor_bytes_of(type, block)) : 0;
  const uint64_t per = (blocks + threads - 1) / threads;
  if (threads == 1 || n < (1u << 16)) return gguf::compare_gguf(type, data, x, n, 0, acc);
  std::vector<DiffAccumulator> part(threads);
  parallel_for(threads, threads, [&](size_t t) {
    const uint64_t b0 = std::min(blocks, t * per), b1 = std::min(blocks, b0 + per);
    if (b0 < b1)
      gguf::compare_gguf(type, data + b0 * bytes_per_block, x + b0 * block, (b1 - b0) * block, b0 * block, part[t]);
  });
  for (const auto& p : part) acc.merge(p);
}

}  // namespace gguf_diff_impl

bool is_gguf(const Input& in) {
  return in.ck.layout == CheckpointLayout::Gguf;
}

DiffResult diff_gguf(Input& source, Input& file, const DiffOptions& o, bool file_is_a) {
  using nlohmann::json;
  using namespace gguf_diff_impl;
  auto t0 = std::chrono::steady_clock::now();
  const json config = gguf::converter_hparams(read_config(source, o.assets));
  const std::string where = source.path;
  const gguf::Arch arch = gguf::arch_of(config, where);
  Selection src_sel;
  src_sel.prefix = o.selection.prefix;
  // The map's parameters from --config, else --assets DIR's config.json (as consolidate's).
  std::string map_config = o.map_config;
  if (map_config.empty() && !o.assets.empty()) {
    const std::string c = o.assets + "/config.json";
    if (std::ifstream(c)) map_config = c;
  }
  if (!o.map.empty()) map_input(source, o.map, src_sel, map_config);
  std::vector<SelectedItem> items = input_items(source, src_sel);

  // The source's tensors in the converter's order (gguf/format.cpp's plan_files).
  // A vision tower's and projector's tensors are not the text model's (gguf::converter_key).
  std::vector<const SelectedItem*> tensors;
  std::vector<std::string> names;
  for (const SelectedItem& it : items)
    if (it.tensor && !gguf::converter_key(it.key).empty()) {
      tensors.push_back(&it);
      names.push_back(gguf::converter_key(it.key));
    }
  std::vector<std::string> sort_keys;
  for (const std::string& name : names) sort_keys.push_back(gguf::sort_key(arch, name));
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return sort_keys[x] < sort_keys[y]; });
  std::vector<gguf::Input> inputs;
  std::vector<const TensorMeta*> metas;
  for (size_t i : order) {
    const TensorMeta& t = input_tensor(source, *tensors[i]);
    if (!t.dtype || !info(*t.dtype).floating || *t.dtype == DType::Float4_E2M1FN_X2)
      throw UnsupportedError(
          Where(where, std::nullopt, tensors[i]->key),
          "'" + tensors[i]->key + "' is " + t.dtype_name + ": a GGUF holds floating tensors, compared as float32");
    inputs.push_back({names[i], t.shape});
    metas.push_back(&t);
  }
  gguf::OutType f32;
  f32.type = gguf::TensorType::F32;
  f32.file_type = 0;
  const std::vector<gguf::TensorPlan> plans = gguf::plan_tensors(arch, config, inputs, f32, where);

  // The file's tensors by name, those --include / --exclude select (by their GGUF names).
  std::map<std::string, size_t> in_file;
  for (size_t i = 0; i < file.ck.md.tensors.size(); ++i) in_file.emplace(file.ck.md.tensors[i].fqn, i);
  std::set<std::string> selected;
  {
    Selection s;
    s.include = o.selection.include;
    s.exclude = o.selection.exclude;
    for (const SelectedItem& it : select_items(file.ck.md, s)) selected.insert(it.key);
  }
  auto chosen = [&](const std::string& name) {
    return (o.selection.include.empty() && o.selection.exclude.empty()) || selected.count(name);
  };
  const bool tied = config.value("tie_word_embeddings", false);

  DiffResult r;
  struct Job {
    size_t key, plan, file;
    uint32_t type;  // the file's tensor's ggml type, whose bound its values are held to
  };
  std::vector<Job> jobs;
  std::set<size_t> matched;
  uint64_t total = 0;
  for (size_t p = 0; p < plans.size(); ++p) {
    const gguf::TensorPlan& tp = plans[p];
    if (!chosen(tp.name)) continue;
    KeyDiff k;
    k.key = tp.name;
    for (size_t in : tp.inputs) k.sources.push_back(tensors[order[in]]->key);
    TensorMeta& src = r.metas.emplace_back();
    src.fqn = tp.name;
    src.dtype = tp.inputs.empty() ? DType::Float32 : *metas[tp.inputs[0]]->dtype;
    src.dtype_name = tp.inputs.empty() ? "float32" : metas[tp.inputs[0]]->dtype_name;
    src.shape = tp.shape;
    auto it = in_file.find(tp.name);
    if (it == in_file.end() && tp.name == "output.weight" && tied && in_file.count("token_embd.weight")) {
      it = in_file.find("token_embd.weight");  // a tied head the file leaves out: within the embedding's bound
      k.b_key = it->first;
    } else if (it != in_file.end()) {
      matched.insert(it->second);
    }
    if (it == in_file.end()) {
      k.status = DiffStatus::OnlyInA;
      k.a = &src;
    } else {
      const TensorMeta& ft = file.ck.md.tensors[it->second];
      k.a = &src;
      k.b = &ft;
      if (ft.shape != tp.shape) {
        k.status = DiffStatus::ShapeChanged;
      } else {
        std::optional<uint32_t> type = gguf::decoded_type(ft.dtype_name);
        if (!type)
          throw UnsupportedError(
              Where(file.path, std::nullopt, ft.fqn),
              "'" + ft.fqn + "' is " + ft.dtype_name +
                  ": diff decodes F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, NVFP4, Q1_0 and Q2_0");
        k.module_bound = KeyDiff::ModuleBound{"gguf", gguf::bound_name(*type), gguf::bound_rule(*type)};
        k.compared = true;
        jobs.push_back({r.keys.size(), p, it->second, *type});
        total += numel_of(tp.shape) * 4;
      }
    }
    r.keys.push_back(std::move(k));
  }
  for (size_t i = 0; i < file.ck.md.tensors.size(); ++i) {
    const TensorMeta& ft = file.ck.md.tensors[i];
    if (matched.count(i) || !chosen(ft.fqn)) continue;
    KeyDiff k;
    k.key = ft.fqn;
    k.status = DiffStatus::OnlyInB;
    k.b = &ft;
    r.keys.push_back(std::move(k));
  }

  // The architecture's keys from config.json ({arch}.*, general.architecture): as the writer's
  // add_model_keys writes them, laid out in a file of no tensors and read back by the same reader
  // as the file's, so that each value's text is compared with the file's.
  {
    gguf::Header h;
    gguf::add_model_keys(h, arch, config, "", "", f32, where);
    const std::vector<uint8_t> bytes = h.bytes();
    const std::string path = "/tmp/dcpctl-gguf-diff-" + std::to_string(::getpid()) + ".gguf";
    {
      std::ofstream out(path, std::ios::binary);
      out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
      if (!out) throw IoError(Where(path), "cannot write the keys' file");
    }
    Checkpoint keys;
    try {
      keys = open_checkpoint(path);
    } catch (...) {
      std::remove(path.c_str());
      throw;
    }
    std::remove(path.c_str());
    const std::string prefix = arch.name + ".";
    for (const auto& [name, value] : keys.values) {
      if (name != "general.architecture" && name.compare(0, prefix.size(), prefix) != 0) continue;
      if (!chosen(name) && !(o.selection.include.empty() && o.selection.exclude.empty())) continue;
      KeyDiff k;
      k.key = name;
      k.value_a = value;
      auto it = file.ck.values.find(name);
      if (it == file.ck.values.end()) {
        k.status = DiffStatus::OnlyInA;
      } else {
        k.value_b = it->second;
        k.status = value == it->second ? DiffStatus::Identical : DiffStatus::ValuesChanged;
      }
      r.keys.push_back(std::move(k));
    }
  }

  // Each tensor whole, as the writer converts it: its inputs read and made float32 one after the
  // other (stacked experts are their concatenation), permuted, split; then the file's bytes.
  uint64_t done = 0;
  bool found = false;
  for (const Job& job : jobs) {
    if (o.stop_early && found) break;
    KeyDiff& k = r.keys[job.key];
    const gguf::TensorPlan& tp = plans[job.plan];
    const TensorMeta& ft = file.ck.md.tensors[job.file];
    const uint64_t n = numel_of(tp.shape);
    uint64_t need = 4 * n + ft.storage.at(0).length, most = 0;
    for (size_t in : tp.inputs)
      most = std::max(most, 2 * metas[in]->nbytes() + 8 * static_cast<uint64_t>(metas[in]->numel()));
    if (need + most > o.max_memory)
      throw UnsupportedError(Where(file.path, std::nullopt, tp.name),
                             "a GGUF tensor is compared whole: '" + tp.name + "' needs " + std::to_string(need + most) +
                                 " bytes, more than --max-memory's " + std::to_string(o.max_memory));
    std::vector<float> x;
    if (tp.inputs.empty()) x = tp.values;
    for (size_t in : tp.inputs) {
      const TensorMeta& t = *metas[in];
      const uint64_t m = static_cast<uint64_t>(t.numel());
      std::vector<uint8_t> raw(t.nbytes());
      read_whole(source, t, raw.data());
      const size_t at = x.size();
      x.resize(at + m);
      if (*t.dtype != DType::Float32)
        cast_elements(*t.dtype, DType::Float32, raw.data(), reinterpret_cast<uint8_t*>(x.data() + at), m);
      else
        std::memcpy(x.data() + at, raw.data(), m * 4);
      if (tp.shift != 0) {  // Gemma's norms, as the writer shifts them (gguf/rows.h)
        std::vector<float> part(x.begin() + static_cast<std::ptrdiff_t>(at), x.end());
        for (float& v : part) v += tp.shift;
        if (*t.dtype == DType::Float16) gguf::round_to_half(part);
        std::copy(part.begin(), part.end(), x.begin() + static_cast<std::ptrdiff_t>(at));
      }
      if (tp.permute_heads > 0) {
        const int64_t rows = t.shape[0], cols = rows ? static_cast<int64_t>(m) / rows : 0;
        std::vector<uint8_t> permuted =
            gguf::permute_rows(reinterpret_cast<const uint8_t*>(x.data() + at), rows, cols, 4, tp.permute_heads);
        std::memcpy(x.data() + at, permuted.data(), permuted.size());
      }
    }
    if (tp.gate_up || tp.transpose) x = gguf::fused_part(tp, x.data(), metas[tp.inputs[0]]->shape);
    if (tp.kv_b) x = gguf::kv_b_part(tp, x.data(), metas[tp.inputs[0]]->shape[1]);
    if (tp.qkv_groups)
      x = gguf::falcon_qkv_part(tp, x.data(), metas[tp.inputs[0]]->shape[0], metas[tp.inputs[0]]->shape[1]);
    if (x.size() != n)
      throw std::logic_error("gguf diff: '" + tp.name + "' planned as " + std::to_string(n) + " elements, made " +
                             std::to_string(x.size()));
    std::vector<uint8_t> stored = read_stored(file, ft);
    compare_parallel(job.type, stored.data(), x.data(), n, std::max(1u, o.threads), k.acc);
    if (k.acc.differ) found = true;
    done += 4 * n + stored.size();
    if (o.progress) o.progress(done, total);
  }
  for (auto& k : r.keys) {
    if (k.compared)
      k.status = k.acc.differ ? DiffStatus::ValuesChanged : !k.b_key.empty() ? DiffStatus::Tied : DiffStatus::Identical;
    if (k.status != DiffStatus::Identical && k.status != DiffStatus::Tied) r.same = false;
  }
  if (found) r.same = false;
  if (file_is_a)
    for (auto& k : r.keys) {
      std::swap(k.a, k.b);
      std::swap(k.value_a, k.value_b);
      if (k.status == DiffStatus::OnlyInA)
        k.status = DiffStatus::OnlyInB;
      else if (k.status == DiffStatus::OnlyInB)
        k.status = DiffStatus::OnlyInA;
    }
  auto rank = [](const KeyDiff& k) {
    switch (k.status) {
      case DiffStatus::ValuesChanged: return 0;
      case DiffStatus::ShapeChanged: return 1;
      case DiffStatus::OnlyInA: return 2;
      case DiffStatus::OnlyInB: return 3;
      default: return 4;
    }
  };
  std::stable_sort(r.keys.begin(), r.keys.end(), [&](const KeyDiff& x, const KeyDiff& y) {
    int rx = rank(x), ry = rank(y);
    if (rx != ry) return rx < ry;
    if (rx != 0) return false;
    if ((x.acc.nan_mismatch > 0) != (y.acc.nan_mismatch > 0)) return x.acc.nan_mismatch > 0;
    return x.acc.max_abs > y.acc.max_abs;
  });
  r.bytes_read = done;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace dcpctl
