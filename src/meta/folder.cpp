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

}  // namespace

bool MetadataFolder::chunk(const Value& st, Value& out) {
  const Value *off = nullptr, *sz = nullptr;
  pickle::Items it = st.items();
  if (it.size() != 4) return false;
  for (uint64_t i = 0; i < 4; i += 2) {
    if (it[i].is_str("offsets"))
      off = &it[i + 1];
    else if (it[i].is_str("sizes"))
      sz = &it[i + 1];
  }
  if (!off || !sz || !int_dims(*off) || !int_dims(*sz) || off->items().size() != sz->items().size()) return false;
  uint64_t nd = off->items().size();
  tb_.charge(2 * nd + 1, "");
  out = ext(kChunk, dims.size());
  dims.push_back(static_cast<int64_t>(nd));
  for (const Value& d : off->items()) dims.push_back(d.as_int());
  for (const Value& d : sz->items()) dims.push_back(d.as_int());
  return true;
}

bool MetadataFolder::key(const Value& st, Value& out) {
  const Value *fqn = nullptr, *off = nullptr, *idx = nullptr;
  pickle::Items it = st.items();
  for (uint64_t i = 0; i + 1 < it.size(); i += 2) {
    if (it[i].is_str("fqn"))
      fqn = &it[i + 1];
    else if (it[i].is_str("offset"))
      off = &it[i + 1];
    else if (it[i].is_str("index"))
      idx = &it[i + 1];
    else
      return false;
  }
  if (!fqn || fqn->kind != Kind::Str || !off) return false;
  if (off->kind != Kind::None && !int_dims(*off)) return false;
  if (idx && idx->kind != Kind::None && idx->kind != Kind::Int) return false;
  Key k;
  k.fqn = intern(fqns, fqn_ids_, fqn->as_str());
  k.index = idx && idx->kind == Kind::Int && idx->as_int() >= 0 ? idx->as_int() : -1;
  k.dims = dims.size();
  if (off->kind == Kind::None) {
    k.nd = kNoOffset;
  } else {
    k.nd = static_cast<uint32_t>(off->items().size());
    tb_.charge(k.nd + 1, "");
    for (const Value& d : off->items()) dims.push_back(d.as_int());
  }
  out = ext(kKey, keys.size());
  keys.push_back(k);
  return true;
}

bool MetadataFolder::storage_info(const Value& st, Value& out) {
  const Value *rp = nullptr, *off = nullptr, *len = nullptr, *td = nullptr;
  pickle::Items it = st.items();
  for (uint64_t i = 0; i + 1 < it.size(); i += 2) {
    if (it[i].is_str("relative_path"))
      rp = &it[i + 1];
    else if (it[i].is_str("offset"))
      off = &it[i + 1];
    else if (it[i].is_str("length"))
      len = &it[i + 1];
    else if (it[i].is_str("transform_descriptors"))
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
  StorageRef ref;  // file and transforms index this folder's own tables (see Mapper::attach)
  ref.file = intern(files, file_ids_, rp->as_str());
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

uint32_t MetadataFolder::intern(std::deque<std::string>& list, std::unordered_map<std::string_view, uint32_t>& ids,
                                std::string_view s) {
  auto f = ids.find(s);
  if (f != ids.end()) return f->second;
  list.emplace_back(s);
  ids.emplace(list.back(), static_cast<uint32_t>(list.size() - 1));
  return static_cast<uint32_t>(list.size() - 1);
}

}  // namespace dcpctl::meta_detail
