#include "meta/folder.h"

#include <algorithm>

namespace dcpctl::meta_detail {
namespace {

// Dims of a Size (or tuple/list) of non-negative ints, or false.
bool int_dims(const Value& v) {
  if (v.kind != Kind::Size && v.kind != Kind::Tuple && v.kind != Kind::List) return false;
  for (const Value& d : v.items())
    if (d.kind != Kind::Int || d.as_int() < 0) return false;
  return true;
}

// v is the str `lit` (a compile-time length, so the comparison is inlined).
template <size_t N>
bool is_name(const Value& v, const char (&lit)[N]) {
  return v.kind == Kind::Str && v.len == N - 1 && same_bytes(v.as_str().data(), lit, N - 1);
}

}  // namespace

const Value* state_dict(const Value& obj) {
  if (obj.kind != Kind::Object) return nullptr;
  const Value& st = obj.as_object().state;
  if (st.kind == Kind::Dict) return &st;
  if (st.kind == Kind::Tuple && st.len == 2 && st.items()[0].kind == Kind::Dict) return &st.items()[0];
  return nullptr;
}

bool read_properties(const Value& props, TensorMeta& t) {
  const Value* dtype = nullptr;
  const Value* rg = nullptr;
  const Value& st = props.kind == Kind::Object ? props.as_object().state : props;
  t.strides_recorded = false;
  // items(), not len: a tuple's len is its item count only when frozen (pickle/value.h).
  if (st.kind == Kind::Tuple && !st.items().empty()) {
    pickle::Items it = st.items();
    dtype = &it[0];
    if (it.size() >= 3) rg = &it[2];
    // torch 2.15's sixth value (the strides, or None): torch <= 2.14 unpacks exactly five.
    t.strides_recorded = it.size() >= 6;
  } else if (const Value* d = state_dict(props)) {
    dtype = d->get("dtype");
    rg = d->get("requires_grad");
  }
  if (!dtype || dtype->kind != Kind::Global) return false;
  t.dtype_name = std::string(dtype->as_global().name);
  t.requires_grad = rg && rg->kind == Kind::Bool && rg->as_bool();
  return true;
}

bool MetadataFolder::fold(const pickle::GlobalRef& cls, const Value& args, const Value& state, Value& out) {
  if (args.kind != Kind::Tuple || args.len != 0 || state.kind != Kind::Dict) return false;
  uint32_t tag = 0;
  // The classes folded so far first (a pointer each: the Tree interns globals), then the others seen.
  for (uint32_t t = kChunk; t <= kTensor; ++t)
    if (cls_[t] == &cls) {
      tag = t;
      break;
    }
  auto seen = seen_.end();
  if (!tag) seen = std::find_if(seen_.begin(), seen_.end(), [&](const Seen& s) { return s.cls == &cls; });
  if (tag) {
    // (a class some record was folded from)
  } else if (seen != seen_.end()) {
    tag = seen->tag;
  } else {
    if (cls.name == "ChunkStorageMetadata")
      tag = kChunk;
    else if (cls.name == "MetadataIndex")
      tag = kKey;
    else if (cls.name == "_StorageInfo")
      tag = kStorage;
    else if (cls.name == "TensorStorageMetadata")
      tag = kTensor;
    if (tag) {
      if (!cls_[tag]) cls_[tag] = &cls;
      if (cls_[tag] != &cls) tag = 0;  // a second class of that name: left to the Mapper
    }
    if (seen_.size() < 64) seen_.push_back({&cls, tag});
  }
  switch (tag) {
    case kChunk: return chunk(state, out);
    case kKey: return key(state, out);
    case kStorage: return storage_info(state, out);
    case kTensor: return tensor(state, out);
    default: return false;
  }
}

bool MetadataFolder::chunk(const Value& st, Value& out) {
  const Value *off = nullptr, *sz = nullptr;
  pickle::Items it = st.items();
  if (it.size() != 4) return false;
  for (uint64_t i = 0; i < 4; i += 2) {
    if (is_name(it[i], "offsets"))
      off = &it[i + 1];
    else if (is_name(it[i], "sizes"))
      sz = &it[i + 1];
  }
  if (!off || !sz || !int_dims(*off) || !int_dims(*sz) || off->items().size() != sz->items().size()) return false;
  uint64_t nd = off->items().size();
  tb_.charge(2 * nd + 1, "");
  out = ext(kChunk, dims.size());
  int64_t* p = dims.append(1 + 2 * nd);
  *p++ = static_cast<int64_t>(nd);
  for (const Value& d : off->items()) *p++ = d.as_int();
  for (const Value& d : sz->items()) *p++ = d.as_int();
  return true;
}

bool MetadataFolder::key(const Value& st, Value& out) {
  const Value *fqn = nullptr, *off = nullptr, *idx = nullptr;
  pickle::Items it = st.items();
  for (uint64_t i = 0; i + 1 < it.size(); i += 2) {
    if (is_name(it[i], "fqn"))
      fqn = &it[i + 1];
    else if (is_name(it[i], "offset"))
      off = &it[i + 1];
    else if (is_name(it[i], "index"))
      idx = &it[i + 1];
    else
      return false;
  }
  if (!fqn || fqn->kind != Kind::Str || !off) return false;
  if (off->kind != Kind::None && (!int_dims(*off) || off->items().size() >= kNoOffset)) return false;
  if (idx && idx->kind != Kind::None && idx->kind != Kind::Int) return false;
  int64_t index = idx && idx->kind == Kind::Int && idx->as_int() >= 0 ? idx->as_int() : -1;
  if (index >= static_cast<int64_t>(kNoIndex)) return false;  // beyond any chunk list: left to the Mapper
  if (dims.size() >= (uint64_t{1} << 55)) return false;
  if (!reserved_) reserve_records();
  Key k;
  k.fqn = intern(fqns, fqn_in_, fqn->as_str());
  k.index = index < 0 ? kNoIndex : static_cast<uint32_t>(index);
  uint64_t nd = kNoOffset;
  uint64_t at = dims.size();
  if (off->kind != Kind::None) {
    nd = off->items().size();
    tb_.charge(nd + 1, "");
    int64_t* p = dims.append(nd);
    for (const Value& d : off->items()) *p++ = d.as_int();
  }
  k.packed = at << 8 | nd;
  out = ext(kKey, keys.size());
  keys.push_back(k);
  return true;
}

bool MetadataFolder::storage_info(const Value& st, Value& out) {
  const Value *rp = nullptr, *off = nullptr, *len = nullptr, *td = nullptr;
  pickle::Items it = st.items();
  for (uint64_t i = 0; i + 1 < it.size(); i += 2) {
    if (is_name(it[i], "relative_path"))
      rp = &it[i + 1];
    else if (is_name(it[i], "offset"))
      off = &it[i + 1];
    else if (is_name(it[i], "length"))
      len = &it[i + 1];
    else if (is_name(it[i], "transform_descriptors"))
      td = &it[i + 1];
    else
      return false;
  }
  if (!rp || rp->kind != Kind::Str || !off || off->kind != Kind::Int || off->as_int() < 0 || !len ||
      len->kind != Kind::Int || len->as_int() < 0)
    return false;
  std::vector<std::string> set;
  if (td && td->kind != Kind::None) {
    if (td->kind != Kind::List && td->kind != Kind::Tuple) return false;
    for (const Value& d : td->items())
      if (d.kind != Kind::Str) return false;
    tb_.charge(td->items().size(), "");
    for (const Value& d : td->items()) set.emplace_back(d.as_str());
  }
  if (!reserved_) reserve_records();
  Stored ref;  // file and transforms index this folder's own tables (see Mapper::storage_entry)
  ref.file = intern(files, file_in_, rp->as_str());
  ref.transforms = 0;
  if (!set.empty()) {
    auto found = std::find(transform_sets.begin(), transform_sets.end(), set);
    ref.transforms = static_cast<uint32_t>(found - transform_sets.begin());
    if (found == transform_sets.end()) transform_sets.push_back(std::move(set));
  }
  if (td) ref.transforms |= kHasTransformField;
  ref.offset = static_cast<uint64_t>(off->as_int());
  ref.length = static_cast<uint64_t>(len->as_int());
  tb_.charge(1, "");
  out = ext(kStorage, storage.size());
  storage.push_back(ref);
  return true;
}

// As the Mapper reads a TensorStorageMetadata (metadata.cpp, Mapper::tensor), for the one shape
// it never refuses: exactly properties, size and chunks; properties with a dtype; size a list of
// non-negative ints; chunks a list of folded chunks of as many dims.
bool MetadataFolder::tensor(const Value& st, Value& out) {
  const Value *props = nullptr, *size = nullptr, *chunks = nullptr;
  pickle::Items it = st.items();
  if (it.size() != 6) return false;
  for (uint64_t i = 0; i < 6; i += 2) {
    if (is_name(it[i], "properties") && !props)
      props = &it[i + 1];
    else if (is_name(it[i], "size") && !size)
      size = &it[i + 1];
    else if (is_name(it[i], "chunks") && !chunks)
      chunks = &it[i + 1];
    else
      return false;
  }
  if (!props || !size || !chunks || !int_dims(*size) || chunks->kind != Kind::List) return false;
  Tensor t;
  if (!read_properties(*props, t.meta)) return false;
  size_t nd = size->items().size();
  pickle::Items cs = chunks->items();
  bool alone = !(chunks->flags & Value::kMemo);  // no other reference to these chunk records
  uint64_t next = cs.empty() ? 0 : cs[0].bits;
  for (const Value& c : cs) {
    if (c.kind != Kind::Ext || c.len != kChunk || static_cast<size_t>(dims[c.bits]) != nd) return false;
    alone = alone && !(c.flags & Value::kMemo) && c.bits == next;
    next = c.bits + 1 + 2 * nd;
  }
  // What the Mapper charges for it.
  tb_.charge(nd, "");
  tb_.charge(cs.size(), "");
  t.meta.dtype = dtype_from_torch_name(t.meta.dtype_name);
  for (const Value& d : size->items()) t.meta.shape.push_back(d.as_int());
  t.meta.chunk_dims.reserve(cs.size() * 2 * nd);
  for (const Value& c : cs) {
    tb_.charge(2 * nd, "");
    const int64_t* d = dims.data() + c.bits + 1;
    t.meta.chunk_dims.insert(t.meta.chunk_dims.end(), d, d + 2 * nd);
  }
  t.chunks = cs.size();
  if (attach) t.meta.storage.resize(cs.size());  // attached storage entries are written here
  if (props->kind == Kind::Object && props->as_object().callable.kind == Kind::Global) {
    const pickle::GlobalRef& g = props->as_object().callable.as_global();
    t.props_class = std::string(g.module) + "." + std::string(g.name);
  } else {
    t.props_class = std::string("<") +
                    pickle::kind_name(props->kind == Kind::Object ? props->as_object().callable.kind : props->kind) +
                    ">";
  }
  // The chunks' records were the last ones made, and nothing else can reach them: give them back.
  if (alone && !cs.empty() && next == dims.size()) dims.truncate(cs[0].bits);
  out = ext(kTensor, tensors.size());
  tensors.push_back(std::move(t));
  return true;
}

// storage_data's pairs, (kKey i, kStorage i) for i = 0, 1, 2, ..., become one run pair (or are
// attached: see the class comment); state_dict_metadata's pairs (str, kTensor) name tensors.
bool MetadataFolder::join_pair(Value* last, Value& k, Value& v) {
  if (attach && k.kind == Kind::Str && v.kind == Kind::Ext && v.len == kTensor && !(v.flags & Value::kMemo)) {
    uint32_t id = intern(fqns, fqn_in_, k.as_str());
    if (named_.size() <= id) named_.resize(id + 1, kNoName);
    named_[id] = named_[id] == kNoName ? static_cast<uint32_t>(v.bits) : kAmbiguous;
    tensors[v.bits].name = id;
    return false;
  }
  if (k.kind != Kind::Ext || v.kind != Kind::Ext || k.len != kKey || v.len != kStorage) return false;
  // (A key the folder declined, e.g. one without an offset attribute, puts the key and storage
  // records out of step: such pairs can still be attached, not joined into runs.)
  if (attach && try_attach(last, k, v)) return true;
  if (k.len == kAttached) return false;  // the first pair of a new attached run
  if (k.bits != v.bits) return false;
  if (last && last[0].kind == Kind::Ext && last[0].len == kRun && last[0].bits + last[1].bits == k.bits &&
      last[1].bits < UINT32_MAX) {
    ++last[1].bits;
    return true;
  }
  uint64_t first = k.bits;
  k = ext(kRun, first);
  v = ext(kRun, 1);
  return false;
}

// The pair (kKey i, kStorage i) written into its tensor's storage vector, if it can be (see the
// class comment): true when merged into `last`, false with k, v rewritten into a new run pair, or
// false with k, v unchanged when it cannot be attached.
bool MetadataFolder::try_attach(Value* last, Value& k, Value& v) {
  if ((k.flags | v.flags) & Value::kMemo) return false;  // the records must stay: another reference reads them
  const uint64_t i = k.bits, j = v.bits;
  if (i >= keys.size() || j >= storage.size()) return false;
  const Key kr = keys[i];
  if (kr.nd() == kNoOffset || kr.index == kNoIndex || kr.fqn >= named_.size()) return false;
  const uint32_t tid = named_[kr.fqn];
  if (tid >= kAmbiguous) return false;
  Tensor& t = tensors[tid];
  const size_t nd = t.meta.shape.size();
  if (t.moved || kr.nd() != nd || kr.index >= t.chunks || t.meta.storage.size() != t.chunks) return false;
  const int64_t* want = dims.data() + kr.dims_at();
  const int64_t* have = t.meta.chunk_dims.data() + 2 * kr.index * nd;
  for (size_t d = 0; d < nd; ++d)
    if (want[d] != have[d]) return false;
  const Stored s = storage[j];
  if (s.transforms & ~kHasTransformField) return false;
  StorageRef& slot = t.meta.storage[kr.index];
  if (slot.present()) return false;
  slot.file = s.file;
  slot.transforms = 0;
  slot.offset = s.offset;
  slot.length = s.length;
  ++t.attached;
  ++attached_total;
  give_back_key(i, nd);
  give_back_storage(j);
  bool merged = last && last[0].kind == Kind::Ext && last[0].len == kAttached && last[0].bits + 1 == runs.size();
  if (!merged) {
    AttachedRun r;
    r.files_begin = r.files_end = static_cast<uint32_t>(run_files.size());
    runs.push_back(r);
  }
  AttachedRun& run = runs.back();
  ++run.count;
  run.transform_field = run.transform_field || (s.transforms & kHasTransformField);
  if (file_stamp_.size() <= s.file) file_stamp_.resize(s.file + 1, 0);
  if (file_stamp_[s.file] != runs.size()) {
    file_stamp_[s.file] = static_cast<uint32_t>(runs.size());
    run_files.push_back(s.file);
    ++run.files_end;
  }
  if (merged) return true;
  k = ext(kAttached, runs.size() - 1);
  v = ext(kAttached, 0);
  return false;
}

// The records of an attached pair are no longer read. A SETITEMS offers up to 1,000 pairs whose
// records were all made before the first is offered, so they are given back once a run of
// attached pairs' records reaches the last records made (a key's offsets too, when nothing else
// was put among them in `dims`).
void MetadataFolder::give_back_key(uint64_t i, size_t nd) {
  Dead& d = dead_keys_;
  if (d.from == d.to || i != d.to) d = {i, i, 0};
  ++d.to;
  d.dims += nd;
  if (d.to != keys.size()) return;
  const uint64_t at = keys[d.from].dims_at();
  if (at + d.dims == dims.size()) dims.truncate(at);
  keys.truncate(d.from);
  d.to = d.from;
}

void MetadataFolder::give_back_storage(uint64_t j) {
  Dead& d = dead_storage_;
  if (d.from == d.to || j != d.to) d = {j, j, 0};
  ++d.to;
  if (d.to != storage.size()) return;
  storage.truncate(d.from);
  d.to = d.from;
}

// Storage entries and keys come one per chunk, and a DCP writer's `.metadata` spends about 140
// bytes on each (a key, its offsets, a _StorageInfo); reserving for one per 128 bytes up front
// spares the vectors' doublings (each a copy, and page faults on the new block). Only what is
// written is ever touched, so an estimate above the real count costs address space, not memory.
void MetadataFolder::reserve_records() {
  reserved_ = true;
  size_t entries = static_cast<size_t>(input_bytes_ / 128);
  keys.reserve(entries);
  storage.reserve(entries);
  dims.reserve(2 * entries);  // a key's offsets: one per dimension, mostly 1 or 2
}

uint32_t MetadataFolder::intern(std::deque<std::string>& list, Interned& in, std::string_view s) {
  // The same string again (a tensor's keys all name it): often the very same bytes, the memo's.
  if (!list.empty() && s.size() == in.last.size() &&
      (s.data() == in.last.data() || same_bytes(s.data(), in.last.data(), s.size())))
    return in.last_id;
  // The string that followed the last one the last time.
  if (!list.empty() && in.last_id < in.next.size()) {
    const Interned::Next& n = in.next[in.last_id];
    if (same_str(s, n.view)) {
      in.last = s;
      in.last_id = n.id;
      return n.id;
    }
  }
  uint32_t id;
  // A small direct-mapped cache in front of the map: a few hundred distinct files alternate.
  size_t h = StrHash{}(s);
  Cached& c = cache_[(h ^ (h >> 23)) & (kCache - 1)];
  if (c.list == &list && same_str(c.view, s)) {
    id = c.id;
  } else {
    auto f = in.ids.find(s);
    if (f != in.ids.end()) {
      id = f->second;
    } else {
      list.emplace_back(s);
      id = static_cast<uint32_t>(list.size() - 1);
      in.ids.emplace(list.back(), id);
    }
    c = {&list, list[id], id};
  }
  if (in.next.size() <= in.last_id) in.next.resize(in.last_id + 1);
  in.next[in.last_id] = {list[id], id};  // (on the first lookup, a guess for id 0 like any other)
  in.last = s;
  in.last_id = id;
  return id;
}

}  // namespace dcpctl::meta_detail
