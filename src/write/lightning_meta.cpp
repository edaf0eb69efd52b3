#include "write/lightning_meta.h"

#include <algorithm>
#include <map>

#include "item/torch_zip.h"
#include "meta/frameworks.h"
#include "pickle/repr.h"
#include "pickle/tree.h"
#include "pickle/vm.h"
#include "store/file.h"
#include "util/crc32.h"
#include "util/dtype.h"

namespace dcpctl {

using nlohmann::json;
using pickle::Kind;
using pickle::Value;

namespace {

constexpr uint64_t kMaxPickleBytes = 1ull << 30;
constexpr int kMaxDepth = 200;  // Pickler::value's own cap
constexpr size_t kCopyWindow = 4u << 20;

// The globals torch.load(weights_only=True) accepts (torch 2.14,
// torch/_weights_only_unpickler.py _get_allowed_globals), which is what Lightning's
// torch.load(meta.pt) accepts.
bool weights_only_allows(std::string_view m, std::string_view n) {
  auto ends = [](std::string_view s, std::string_view suf) {
    return s.size() >= suf.size() && s.substr(s.size() - suf.size()) == suf;
  };
  if (m == "collections") return n == "OrderedDict" || n == "Counter";
  if (m == "builtins") return n == "bytearray" || n == "set" || n == "complex";
  if (m == "_codecs") return n == "encode";
  if (m == "torch.nn.parameter") return n == "Parameter";
  if (m == "torch.serialization") return n == "_get_layout";
  if (m == "torch._tensor") return n == "_rebuild_from_type_v2";
  if (m == "torch.storage") return n == "UntypedStorage" || n == "TypedStorage";
  if (m == "torch._utils")
    return n == "_rebuild_parameter" || n == "_rebuild_parameter_with_state" || n == "_rebuild_qtensor" ||
           n == "_rebuild_tensor" || n == "_rebuild_tensor_v2" || n == "_rebuild_tensor_v3" ||
           n == "_rebuild_sparse_tensor" || n == "_rebuild_meta_tensor_no_storage" || n == "_rebuild_nested_tensor" ||
           n == "_rebuild_wrapper_subclass" || n == "_rebuild_device_tensor_from_numpy" ||
           n == "_rebuild_device_tensor_from_cpu_tensor";
  if (m == "torch.cuda") return ends(n, "Tensor");
  if (m != "torch") return false;
  if (n == "Size" || n == "Tensor" || n == "device" || dtype_from_torch_name(n) || ends(n, "Tensor") ||
      ends(n, "Storage"))
    return true;
  if (n == "per_tensor_affine" || n == "per_tensor_symmetric" || n == "per_channel_affine" ||
      n == "per_channel_symmetric" || n == "per_channel_affine_float_qparams")
    return true;
  // torch.uint1..7 and torch.int1..7
  std::string_view bits = n.substr(0, 4) == "uint"  ? n.substr(4)
                          : n.substr(0, 3) == "int" ? n.substr(3)
                                                    : std::string_view();
  return bits.size() == 1 && bits[0] >= '1' && bits[0] <= '7';
}

std::string key_text(const Value& k) {
  if (k.is(Kind::Str)) return std::string(k.as_str());
  if (k.is(Kind::Int)) return std::to_string(k.as_int());
  return pickle::repr(k, 80);
}

std::string join_key(const std::string& a, const std::string& b) {
  return a.empty() ? b : a + "." + b;
}

// Python's re.match("optimizer_[0-9]+", key): the prefix, then at least one digit.
bool optimizer_key(const std::string& k) {
  static const std::string pre = "optimizer_";
  return k.size() > pre.size() && k.compare(0, pre.size(), pre) == 0 && k[pre.size()] >= '0' && k[pre.size()] <= '9';
}

}  // namespace

// ---- the top level ----

std::vector<TopEntry> lightning_top_level(const std::vector<std::string>& dcp_keys,
                                          const std::vector<std::string>& meta_keys, bool trainer) {
  std::vector<TopEntry> d;  // a Python dict: insertion order, assignment in place
  auto find = [&](const std::string& name) {
    for (size_t i = 0; i < d.size(); ++i)
      if (d[i].name == name) return i;
    return d.size();
  };
  auto assign = [&](TopEntry e) {
    size_t i = find(e.name);
    if (i < d.size())
      d[i] = std::move(e);
    else
      d.push_back(std::move(e));
  };
  auto pop = [&](const std::string& name) {
    size_t i = find(name);
    if (i == d.size())
      throw UnsupportedError(
          Where("", std::nullopt, name),
          "Lightning's consolidation would fail here (KeyError): the checkpoint has no top-level '" + name + "'");
    TopEntry e = std::move(d[i]);
    d.erase(d.begin() + static_cast<std::ptrdiff_t>(i));
    return e;
  };
  for (const std::string& k : dcp_keys) {
    TopEntry e;
    e.kind = TopEntry::Dcp;
    e.name = e.dcp = k;
    d.push_back(std::move(e));
  }
  // checkpoint.update(meta)
  for (size_t i = 0; i < meta_keys.size(); ++i) {
    TopEntry e;
    e.kind = TopEntry::Meta;
    e.name = meta_keys[i];
    e.meta = i;
    assign(std::move(e));
  }
  if (!trainer) return d;
  // _format_checkpoint: checkpoint["state_dict"] = checkpoint.pop("model")
  TopEntry model = pop("model");
  model.name = "state_dict";
  assign(std::move(model));
  size_t n =
      static_cast<size_t>(std::count_if(d.begin(), d.end(), [](const TopEntry& e) { return optimizer_key(e.name); }));
  if (n == 0) return d;
  TopEntry states;
  states.kind = TopEntry::List;
  states.name = "optimizer_states";
  for (size_t i = 0; i < n; ++i) states.items.push_back(pop("optimizer_" + std::to_string(i)));
  assign(std::move(states));
  return d;
}

// ---- meta.pt ----

struct LightningMeta::Impl {
  std::shared_ptr<ReadFile> file;
  std::unique_ptr<TorchZip> zip;
  std::unique_ptr<pickle::Tree> tree;
  std::vector<Value> values;  // parallel to keys_
  struct Storage {
    std::string out_key;
    RecordLocation rec;
    std::string record;
  };
  std::vector<Storage> storages;
  std::map<std::string, size_t> by_key;  // meta.pt's storage key -> storages
  size_t first_key = 0;
  bool keep_unsafe = false;
  std::string path;

  UnsupportedError refuse(const std::string& key, const std::string& what) const {
    return UnsupportedError(
        Where(path, std::nullopt, key),
        what + "; --no-lightning-meta writes the .pt without meta.pt (Lightning's non-tensor state)");
  }

  // A persistent id as torch.save writes one: ('storage', <storage class>, key, location, count).
  // Registers the storage; returns false when the pid has another form.
  bool storage_pid(const Value& pid, const std::string& key) {
    if (!pid.is(Kind::Tuple)) return false;
    pickle::Items it = pid.items();
    if (it.size() != 5 || !it[0].is_str("storage") || !it[1].is(Kind::Global) ||
        !(it[2].is(Kind::Str) || it[2].is(Kind::Int)) || !it[3].is(Kind::Str) || !it[4].is(Kind::Int) ||
        it[4].as_int() < 0)
      return false;
    const pickle::GlobalRef& g = it[1].as_global();
    uint64_t item = 0;
    if (g.module == "torch.storage" && g.name == "UntypedStorage")
      item = 1;
    else if (g.module == "torch")
      if (std::optional<DType> dt = dtype_from_storage_class(g.name)) item = itemsize(*dt);
    if (item == 0)
      throw refuse(key, "a tensor's storage of class " + std::string(g.module) + "." + std::string(g.name) +
                            " dcpctl does not know");
    std::string skey = key_text(it[2]);
    if (by_key.count(skey)) return true;
    Storage s;
    s.record = "data/" + skey;
    s.rec = zip->locate(s.record);
    uint64_t count = static_cast<uint64_t>(it[4].as_int());
    if (count > s.rec.size / item)
      throw FormatError(Where(path, s.rec.offset, key),
                        "storage '" + skey + "' declares " + std::to_string(count) + " elements of " +
                            std::to_string(item) + " bytes; its record holds " + std::to_string(s.rec.size) + " bytes");
    s.out_key = std::to_string(first_key + storages.size());
    by_key[skey] = storages.size();
    storages.push_back(std::move(s));
    return true;
  }

  // Every global, persistent id and nesting under top-level key `key` (at `at`), checked.
  void check(const Value& v, const std::string& at, int depth) {
    if (depth > kMaxDepth) throw refuse(at, "nested deeper than dcpctl re-pickles (" + std::to_string(kMaxDepth) + ")");
    switch (v.kind) {
      case Kind::Global: {
        const pickle::GlobalRef& g = v.as_global();
        if (g.module == pickle::kExtensionModule)
          throw refuse(at,
                       "holds copyreg extension code " + std::string(g.name) +
                           " (an EXT opcode): a reference into the registry of the process that wrote it, which the "
                           "pickle VM cannot represent");
        if (!keep_unsafe && !weights_only_allows(g.module, g.name))
          throw refuse(
              at, "holds " + std::string(g.module) + "." + std::string(g.name) +
                      ", which torch.load(weights_only=True) refuses (so does Lightning's own consolidation, which "
                      "loads meta.pt that way); --keep-unsafe-values keeps it");
        return;
      }
      case Kind::Object: {
        const pickle::ObjectNode& o = v.as_object();
        check(o.callable, at, depth + 1);
        check(o.args, at, depth + 1);
        check(o.state, at, depth + 1);
        return;
      }
      case Kind::PersId:
        if (!storage_pid(v.as_persid(), at))
          throw refuse(
              at, "holds a persistent id " + pickle::repr(v.as_persid(), 120) +
                      " that is not a torch storage: the VM keeps it as a reference to something outside the pickle, "
                      "which cannot be carried over");
        return;
      case Kind::Ext: throw refuse(at, "holds a value the pickle VM cannot represent");
      case Kind::Dict: {
        pickle::Items it = v.items();
        for (uint64_t i = 0; i + 1 < it.size(); i += 2) {
          check(it[i], at, depth + 1);
          check(it[i + 1], join_key(at, key_text(it[i])), depth + 1);
        }
        return;
      }
      case Kind::List:
      case Kind::Tuple:
      case Kind::Set:
      case Kind::Size: {
        uint64_t i = 0;
        for (const Value& e : v.items()) check(e, v.is(Kind::Size) ? at : join_key(at, std::to_string(i++)), depth + 1);
        return;
      }
      default: return;
    }
  }

  // Re-emits a persistent id with its storage renamed, and located on the CPU.
  bool emit_pid(Pickler& p, const Value& pid) const {
    pickle::Items it = pid.items();
    auto s = by_key.find(key_text(it[2]));
    if (s == by_key.end()) return false;
    p.mark();
    p.str("storage", true);
    p.global(it[1].as_global().module, it[1].as_global().name);
    p.str(storages[s->second].out_key);
    p.str("cpu", true);
    p.integer(it[4].as_int());
    p.tuple_from_mark();
    return true;
  }
};

LightningMeta::LightningMeta(const std::string& path, size_t first_key, bool keep_unsafe)
    : impl_(new Impl), path_(path) {
  Impl& m = *impl_;
  m.path = path;
  m.first_key = first_key;
  m.keep_unsafe = keep_unsafe;
  m.file = std::make_shared<ReadFile>(path);
  uint8_t magic[4] = {0, 0, 0, 0};
  if (m.file->size() >= 4) m.file->read_at(0, magic, 4);
  if (!(magic[0] == 'P' && magic[1] == 'K' && magic[2] == 3 && magic[3] == 4))
    throw UnsupportedError(
        Where(path),
        "not a torch.save zip archive (Lightning writes meta.pt with torch.save); --no-lightning-meta "
        "writes the .pt without it");
  struct Whole final : ByteSource {
    std::shared_ptr<ReadFile> f;
    uint64_t size() const override { return f->size(); }
    void read(uint64_t pos, void* buf, size_t n) const override { f->read_near(pos, buf, n, 0, f->size()); }
  };
  auto src = std::make_shared<Whole>();
  src->f = m.file;
  m.zip = std::make_unique<TorchZip>(src, Where(path));
  if (m.zip->has("byteorder")) {
    std::vector<uint8_t> bo = m.zip->read_small("byteorder", 64);
    if (std::string(bo.begin(), bo.end()) != "little")
      throw UnsupportedError(Where(path), "saved in byte order '" + std::string(bo.begin(), bo.end()) + "'");
  }
  std::vector<uint8_t> pkl = m.zip->read_small("data.pkl", kMaxPickleBytes);
  pickle::ParseOptions po;
  po.source = path + ": data.pkl";
  po.opaque_extensions = true;
  try {
    m.tree = pickle::parse(ByteSpan(pkl.data(), pkl.size()), po);
  } catch (const Error& e) {
    throw_error(e.exit_code(), e.where(),
                e.detail() + "; --no-lightning-meta writes the .pt without meta.pt (Lightning's non-tensor state)");
  }
  const Value& root = m.tree->root;
  if (!root.is(Kind::Dict))
    throw UnsupportedError(Where(path), "holds a " + std::string(pickle::kind_name(root.kind)) +
                                            ", not the dict Lightning saves (its consolidation merges a dict's keys)");
  pickle::Items it = root.items();
  for (uint64_t i = 0; i + 1 < it.size(); i += 2) {
    if (!it[i].is(Kind::Str))
      throw m.refuse(pickle::repr(it[i], 80),
                     "a top-level key that is not a string cannot sit beside the DCP state's keys");
    std::string key(it[i].as_str());
    m.check(it[i + 1], key, 0);
    // The pickle writer must be able to re-emit all of it (what check() let through, it can).
    Pickler trial(2);
    trial.persistent_id = [&](Pickler& p, const Value& pid) { return m.emit_pid(p, pid); };
    if (!trial.value(it[i + 1])) throw m.refuse(key, "holds nesting dcpctl cannot re-pickle");
    // A key given twice: the pickle's last value wins, in the first one's place (a dict).
    auto dup = std::find(keys_.begin(), keys_.end(), key);
    if (dup != keys_.end()) {
      m.values[static_cast<size_t>(dup - keys_.begin())] = it[i + 1];
      continue;
    }
    keys_.push_back(std::move(key));
    m.values.push_back(it[i + 1]);
  }
  tensors_ = m.storages.size();
}

LightningMeta::~LightningMeta() = default;

void LightningMeta::arrange(const std::vector<std::string>& dcp_keys) {
  trainer_ = std::find(keys_.begin(), keys_.end(), "pytorch-lightning_version") != keys_.end() &&
             std::find(dcp_keys.begin(), dcp_keys.end(), "model") != dcp_keys.end();
  try {
    top_ = lightning_top_level(dcp_keys, keys_, trainer_);
  } catch (const UnsupportedError& e) {
    throw impl_->refuse(e.where().key, e.detail());
  }
}

void LightningMeta::emit_checkpoint(Pickler& p, const std::function<void(const std::string&)>& emit_dcp) const {
  p.persistent_id = [this](Pickler& q, const Value& pid) { return impl_->emit_pid(q, pid); };
  std::function<void(const TopEntry&)> one = [&](const TopEntry& e) {
    switch (e.kind) {
      case TopEntry::Dcp: emit_dcp(e.dcp); break;
      case TopEntry::Meta:
        if (!p.value(impl_->values[e.meta])) throw impl_->refuse(e.name, "holds nesting dcpctl cannot re-pickle");
        break;
      case TopEntry::List:
        p.empty_list();
        if (!e.items.empty()) {
          p.mark();
          for (const TopEntry& c : e.items) one(c);
          p.appends();
        }
        break;
    }
  };
  p.empty_dict();
  if (!top_.empty()) {
    p.mark();
    for (const TopEntry& e : top_) {
      p.str(e.name);
      one(e);
    }
    p.setitems();
  }
  p.persistent_id = nullptr;
}

void LightningMeta::write_storages(TorchSaveWriter& w, OutputFile& out) const {
  const Impl& m = *impl_;
  std::vector<uint8_t> buf;
  for (const Impl::Storage& s : m.storages) {
    w.write_storage_streamed(s.out_key, s.rec.size, [&] {
      buf.resize(static_cast<size_t>(std::min<uint64_t>(kCopyWindow, std::max<uint64_t>(s.rec.size, 1))));
      uint32_t crc = 0;
      for (uint64_t at = 0; at < s.rec.size;) {
        size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), s.rec.size - at));
        m.file->read_at(s.rec.offset + at, buf.data(), n);
        crc = crc32_update(crc, buf.data(), n);
        out.append(buf.data(), n);
        at += n;
      }
      if (crc != s.rec.crc)
        throw CorruptError(Where(m.path, s.rec.offset), "record '" + s.record + "' (" + std::to_string(s.rec.size) +
                                                            " bytes) fails its CRC-32 check");
      return crc;
    });
  }
}

// ---- consolidate's decision ----

LightningMerge merge_lightning_meta(const Checkpoint& ck, const WritePlan& plan,
                                    const std::vector<const SelectedItem*>& kept_values, const ConsolidateOptions& o) {
  LightningMerge r;
  bool dcp = ck.layout == CheckpointLayout::Dcp || ck.layout == CheckpointLayout::DcpSafetensorsItems ||
             ck.layout == CheckpointLayout::DcpRankLocal;
  std::string path = join_path(ck.dir, kLightningMetaFile);
  if (!dcp || !path_exists(path) || is_directory(path)) return r;
  std::string why;
  if (o.format->tensors_only)
    why = "safetensors holds tensors only";
  else if (!o.lightning_meta)
    why = "--no-lightning-meta";
  else if (o.flat)
    why = "--flat writes flat keys, Lightning's checkpoint is nested";
  else if (!o.selection.empty())
    why = "--include/--exclude/--select keep part of the DCP state only";
  else if (!o.map.empty())
    why = "--map writes the mapped model's tensors only";
  else if (o.lora.mode != LoraMode::Keep)
    why = "--lora writes the adapter or the merged model only";
  if (!why.empty()) {
    r.summary = {{"path", path}, {"merged", false}, {"reason", why}};
    if (o.lightning_meta)
      r.note = path + " (Lightning's non-tensor state: epoch, loops, callbacks, ...) is not merged: " + why;
    return r;
  }
  // The DCP state's top-level keys, in the order dcp_to_torch_save's nesting meets them: the
  // tensors the plan writes and the values kept.
  std::vector<std::string> top;
  size_t ti = 0, vi = 0;
  for (const SelectedItem& it : plan.items) {
    bool kept = false;
    if (it.tensor) {
      kept = ti < plan.tensors.size() && plan.tensors[ti].key == it.key;
      if (kept) ++ti;
    } else if (vi < kept_values.size() && kept_values[vi] == &it) {
      kept = true;
      ++vi;
    }
    if (!kept || it.path.empty()) continue;
    std::string k = it.path[0].is_index ? std::to_string(it.path[0].index) : it.path[0].key;
    if (std::find(top.begin(), top.end(), k) == top.end()) top.push_back(std::move(k));
  }
  r.meta = std::make_unique<LightningMeta>(path, plan.tensors.size(), o.keep_unsafe_values);
  r.meta->arrange(top);
  r.summary = {{"path", path},
               {"merged", true},
               {"layout", r.meta->trainer() ? "trainer" : "fabric"},
               {"keys", r.meta->keys()},
               {"tensors", r.meta->tensors()}};
  return r;
}

}  // namespace dcpctl
