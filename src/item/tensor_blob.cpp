#include "item/tensor_blob.h"

namespace dcpctl {

using pickle::Kind;
using pickle::Value;

bool TensorBlob::contiguous() const {
  int64_t expect = 1;
  for (size_t d = size.size(); d-- > 0;) {
    if (size[d] != 1 && stride[d] != expect) return false;
    expect *= size[d];
  }
  return true;
}

// Both saturate at UINT64_MAX: a hostile size/stride must fail the bounds check, not wrap.
uint64_t TensorBlob::numel() const {
  uint64_t n = 1;
  for (int64_t s : size)
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(s), &n)) return UINT64_MAX;
  return n;
}

uint64_t TensorBlob::extent() const {
  if (numel() == 0) return 0;
  uint64_t last = static_cast<uint64_t>(storage_offset), step;
  for (size_t d = 0; d < size.size(); ++d) {
    if (__builtin_mul_overflow(static_cast<uint64_t>(size[d] - 1), static_cast<uint64_t>(stride[d]), &step) ||
        __builtin_add_overflow(last, step, &last))
      return UINT64_MAX;
  }
  return last == UINT64_MAX ? UINT64_MAX : last + 1;
}

namespace {

[[noreturn]] void bad(const Where& w, const std::string& msg) {
  throw FormatError(w, "data.pkl: " + msg);
}

std::vector<int64_t> int_list(const Value& v, const Where& w, const char* what, bool allow_negative) {
  if (v.kind != Kind::Tuple && v.kind != Kind::Size && v.kind != Kind::List)
    bad(w, std::string(what) + " is a " + pickle::kind_name(v.kind) + ", expected a tuple of ints");
  std::vector<int64_t> out;
  for (const Value& e : v.items()) {
    if (e.kind != Kind::Int) bad(w, std::string(what) + " holds a " + pickle::kind_name(e.kind));
    if (!allow_negative && e.as_int() < 0) bad(w, std::string(what) + " holds a negative value");
    out.push_back(e.as_int());
  }
  return out;
}

}  // namespace

TensorBlob interpret_tensor_pickle(const Value& root_in, const Where& w) {
  const Value* root = &root_in;
  if (root->is_global("torch._utils", "_rebuild_parameter") ||
      root->is_global("torch._utils", "_rebuild_parameter_with_state")) {
    const Value& a = root->as_object().args;
    if (a.kind != Kind::Tuple || a.len < 1) bad(w, "_rebuild_parameter without a tensor");
    root = &a.items()[0];
  }
  bool v2 = root->is_global("torch._utils", "_rebuild_tensor_v2");
  bool v3 = root->is_global("torch._utils", "_rebuild_tensor_v3");
  if (!v2 && !v3) {
    std::string what = root->kind == Kind::Object && root->as_object().callable.kind == Kind::Global
                           ? std::string(root->as_object().callable.as_global().module) + "." +
                                 std::string(root->as_object().callable.as_global().name)
                           : std::string(pickle::kind_name(root->kind));
    throw UnsupportedError(w, "data.pkl holds " + what + ", not a plain tensor (_rebuild_tensor_v2/v3)");
  }
  const Value& args = root->as_object().args;
  if (args.kind != Kind::Tuple || args.len < (v3 ? 7u : 6u)) bad(w, "tensor rebuild call has too few arguments");
  const pickle::Items a = args.items();

  const Value& st = a[0];
  if (st.kind != Kind::PersId) bad(w, "tensor storage is not a persistent id");
  const Value& pid = st.as_persid();
  if (pid.kind != Kind::Tuple || pid.len < 5 || !pid.items()[0].is_str("storage"))
    bad(w, "storage persistent id is not ('storage', type, key, location, size)");
  const pickle::Items p = pid.items();
  if (p[1].kind != Kind::Global) bad(w, "storage type is not a class reference");
  if (p[2].kind != Kind::Str) bad(w, "storage key is not a string");
  if (p[4].kind != Kind::Int || p[4].as_int() < 0) bad(w, "storage size is not a non-negative int");

  TensorBlob b;
  b.storage_key = std::string(p[2].as_str());
  std::string_view storage_class = p[1].as_global().name;
  uint64_t count = static_cast<uint64_t>(p[4].as_int());
  if (v3) {
    const Value& dt = a[6];
    if (dt.kind != Kind::Global) bad(w, "_rebuild_tensor_v3 dtype is not a torch dtype");
    auto d = dtype_from_torch_name(dt.as_global().name);
    if (!d) throw UnsupportedError(w, "tensor of dtype torch." + std::string(dt.as_global().name));
    b.dtype = *d;
    if (storage_class == "UntypedStorage")
      b.storage_bytes = count;
    else
      b.storage_bytes = count * itemsize(b.dtype);
  } else {
    auto d = dtype_from_storage_class(storage_class);
    if (!d) throw UnsupportedError(w, "tensor with storage type torch." + std::string(storage_class));
    b.dtype = *d;
    if (count > UINT64_MAX / 16) bad(w, "storage size is absurd");
    b.storage_bytes = count * itemsize(b.dtype);
  }
  if (a[1].kind != Kind::Int || a[1].as_int() < 0) bad(w, "storage offset is not a non-negative int");
  b.storage_offset = a[1].as_int();
  b.size = int_list(a[2], w, "size", false);
  b.stride = int_list(a[3], w, "stride", false);
  if (b.size.size() != b.stride.size()) bad(w, "size and stride differ in length");
  return b;
}

}  // namespace dcpctl
