#include "pickle/tree.h"

#include <algorithm>
#include <cstring>

namespace dcpctl::pickle {

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::None: return "None";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::BigInt: return "int";
    case Kind::Float: return "float";
    case Kind::Str: return "str";
    case Kind::Bytes: return "bytes";
    case Kind::Tuple: return "tuple";
    case Kind::List: return "list";
    case Kind::Dict: return "dict";
    case Kind::Set: return "set";
    case Kind::Global: return "global";
    case Kind::Object: return "object";
    case Kind::Size: return "torch.Size";
    case Kind::PersId: return "persistent id";
    case Kind::Ext: return "object";  // a folded object is still one to whoever reads the pickle
  }
  return "?";
}

double Value::as_float() const {
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}

Items boxed_items(const Value& v) {
  const auto& oc = *reinterpret_cast<const OpenContainer*>(v.bits);
  return {oc.items.data(), oc.items.size()};
}

const Value* Value::get(std::string_view key) const {
  if (kind != Kind::Dict) return nullptr;
  Items it = items();
  for (uint64_t i = 0; i + 1 < it.size(); i += 2)
    if (it[i].is_str(key)) return &it[i + 1];
  return nullptr;
}

bool Value::is_global(std::string_view module, std::string_view name) const {
  const Value* g = this;
  if (kind == Kind::Object) g = &as_object().callable;
  if (g->kind != Kind::Global) return false;
  return g->as_global().module == module && g->as_global().name == name;
}

size_t Tree::bytes_reserved() const {
  size_t n = bytes_.bytes_reserved() + values_.bytes_reserved() + objects_.bytes_reserved();
  for (const auto& oc : open_) n += oc.items.capacity() * sizeof(Value) + sizeof(OpenContainer);
  return n;
}

Value Tree::make_str(Kind kind, std::string_view s) {
  Value v;
  v.kind = kind;
  v.len = static_cast<uint32_t>(s.size());
  char* p = bytes_.alloc(s.size() ? s.size() : 1);
  if (!s.empty()) std::memcpy(p, s.data(), s.size());
  v.bits = reinterpret_cast<uint64_t>(p);
  return v;
}

Value Tree::make_frozen(Kind kind, const Value* items, size_t n) {
  Value v;
  v.kind = kind;
  v.len = static_cast<uint32_t>(n);
  Value* p = values_.alloc(n ? n : 1);
  uint16_t depth = 0;
  for (size_t i = 0; i < n; ++i) {
    p[i] = items[i];
    depth = std::max<uint16_t>(depth, static_cast<uint16_t>(items[i].depth + 1));
  }
  v.depth = depth;
  v.bits = reinterpret_cast<uint64_t>(p);
  return v;
}

Value Tree::make_open(Kind kind) {
  OpenContainer* oc;
  if (!free_open_.empty()) {
    oc = free_open_.back();
    free_open_.pop_back();
  } else {
    open_.emplace_back();
    oc = &open_.back();
  }
  Value v;
  v.kind = kind;
  v.flags = Value::kBoxed;
  v.bits = reinterpret_cast<uint64_t>(oc);
  return v;
}

Value Tree::freeze(const Value& v) {
  if (!(v.flags & Value::kBoxed)) return v;
  OpenContainer& oc = open(v);
  if (oc.pinned || oc.items.size() > UINT32_MAX) return v;
  Value f = make_frozen(v.kind, oc.items.data(), oc.items.size());
  f.depth = std::max(f.depth, v.depth);
  f.flags |= v.flags & Value::kOrdered;
  oc.items.clear();
  if (oc.items.capacity() > 64) oc.items.shrink_to_fit();
  free_open_.push_back(&oc);
  return f;
}

void Tree::discard(const Value& v) {
  if ((v.flags & Value::kMemo) || v.bits == 0) return;
  if (v.flags & Value::kBoxed) {
    OpenContainer& oc = open(v);
    if (oc.pinned) return;
    oc.items.clear();
    if (oc.items.capacity() > 64) oc.items.shrink_to_fit();
    free_open_.push_back(&oc);
    return;
  }
  switch (v.kind) {
    case Kind::Str:
    case Kind::Bytes:
    case Kind::BigInt: bytes_.release_tail(reinterpret_cast<char*>(v.bits), v.len ? v.len : 1); break;
    case Kind::Tuple:
    case Kind::List:
    case Kind::Dict:
    case Kind::Set:
    case Kind::Size: values_.release_tail(reinterpret_cast<Value*>(v.bits), v.len ? v.len : 1); break;
    case Kind::Object: objects_.release_tail(reinterpret_cast<ObjectNode*>(v.bits), 1); break;
    default: break;
  }
}

Value Tree::make_global(std::string_view module, std::string_view name) {
  auto key = std::make_pair(std::string(module), std::string(name));
  auto it = global_index_.find(key);
  const GlobalRef* g;
  if (it != global_index_.end()) {
    g = it->second;
  } else {
    Value m = make_str(Kind::Str, module), n = make_str(Kind::Str, name);
    global_nodes_.push_back(GlobalRef{m.as_str(), n.as_str()});
    g = &global_nodes_.back();
    global_index_.emplace(std::move(key), g);
    global_list_.push_back(g);
  }
  Value v;
  v.kind = Kind::Global;
  v.bits = reinterpret_cast<uint64_t>(g);
  return v;
}

Value Tree::make_object(const Value& callable, const Value& args) {
  ObjectNode* n = objects_.alloc(1);
  n->callable = callable;
  n->args = args;
  n->state = Value{};
  Value v;
  v.kind = Kind::Object;
  v.depth = static_cast<uint16_t>(std::max(callable.depth, args.depth) + 1);
  v.bits = reinterpret_cast<uint64_t>(n);
  return v;
}

Value Tree::make_persid(const Value& pid) {
  Value* p = values_.alloc(1);
  *p = pid;
  Value v;
  v.kind = Kind::PersId;
  v.depth = static_cast<uint16_t>(pid.depth + 1);
  v.bits = reinterpret_cast<uint64_t>(p);
  return v;
}

}  // namespace dcpctl::pickle
