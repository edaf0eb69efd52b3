#include "python/checkpoint.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <mutex>

#include "item/read_box.h"
#include "util/error.h"

namespace dcpctl::py {

namespace {

nb::list chunk_list(const Checkpoint& ck, const TensorMeta& t) {
  nb::list chunks;
  for (size_t i = 0; i < t.num_chunks(); ++i) {
    nb::dict c;
    c["offsets"] = std::vector<int64_t>(t.chunk_offsets(i), t.chunk_offsets(i) + t.ndim());
    c["sizes"] = std::vector<int64_t>(t.chunk_sizes(i), t.chunk_sizes(i) + t.ndim());
    const StorageRef& ref = t.storage[i];
    if (ref.present()) {
      const std::string& file = ck.md.files[ref.file];
      std::optional<int> rank = rank_of_file(file);
      c["file"] = file;
      c["rank"] = rank ? nb::cast(*rank) : nb::none();
      c["offset"] = ref.offset;
      c["length"] = ref.length;
    } else {
      c["file"] = nb::none();
    }
    chunks.append(c);
  }
  return chunks;
}

}  // namespace

OpenCheckpoint::OpenCheckpoint(const std::string& path, uint64_t max_memory, unsigned threads)
    : in_(open_input(path)), max_memory_(max_memory), threads_(std::max(1u, threads)) {
  for (size_t i = 0; i < in_->ck.md.tensors.size(); ++i) tensors_.emplace(in_->ck.md.tensors[i].fqn, i);
  for (size_t i = 0; i < in_->ck.md.bytes.size(); ++i) bytes_.emplace(in_->ck.md.bytes[i].fqn, i);
}

void OpenCheckpoint::require_open() const {
  if (!in_) throw nb::value_error("the checkpoint is closed");
}

const TensorMeta& OpenCheckpoint::tensor(const std::string& key) const {
  require_open();
  auto it = tensors_.find(key);
  if (it == tensors_.end()) {
    std::string why = bytes_.count(key) ? "is a non-tensor value (read it with value())" : "is not in the checkpoint";
    throw nb::key_error(("'" + key + "' " + why).c_str());
  }
  return in_->ck.md.tensors[it->second];
}

std::vector<std::string> OpenCheckpoint::keys() const {
  std::shared_lock lock(mu_);
  require_open();
  std::vector<std::string> out;
  for (const TensorMeta& t : in_->ck.md.tensors) out.push_back(t.fqn);
  return out;
}

std::vector<std::string> OpenCheckpoint::values() const {
  std::shared_lock lock(mu_);
  require_open();
  std::vector<std::string> out;
  for (const BytesMeta& b : in_->ck.md.bytes) out.push_back(b.fqn);
  return out;
}

bool OpenCheckpoint::contains(const std::string& key) const {
  std::shared_lock lock(mu_);
  require_open();
  return tensors_.count(key) > 0;
}

nb::dict OpenCheckpoint::info(const std::string& key) const {
  std::shared_lock lock(mu_);
  const TensorMeta& t = tensor(key);
  nb::dict d;
  d["key"] = t.fqn;
  d["dtype"] = t.dtype ? std::string(torch_name(*t.dtype)) : t.dtype_name;
  d["shape"] = t.shape;
  d["numel"] = t.numel();
  d["nbytes"] = t.nbytes();
  d["readable"] = t.dtype.has_value() && !opaque_type(in_->ck, t);
  d["chunks"] = chunk_list(in_->ck, t);
  return d;
}

nb::dict OpenCheckpoint::describe() const {
  std::shared_lock lock(mu_);
  require_open();
  nb::dict d;
  d["path"] = in_->path;
  d["layout"] = layout_name(in_->ck.layout);
  d["tensors"] = in_->ck.md.tensors.size();
  d["values"] = in_->ck.md.bytes.size();
  return d;
}

std::string OpenCheckpoint::value(const std::string& key) const {
  std::shared_lock lock(mu_);
  require_open();
  auto it = bytes_.find(key);
  if (it == bytes_.end()) throw nb::key_error(("'" + key + "' is not a non-tensor value of the checkpoint").c_str());
  nb::gil_scoped_release release;
  return value_repr(*in_, in_->ck.md.bytes[it->second]);
}

nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>> OpenCheckpoint::read(const std::string& key,
                                                                  const std::vector<int64_t>& offsets,
                                                                  const std::vector<int64_t>& sizes,
                                                                  bool check_records) {
  std::shared_lock lock(mu_);
  const TensorMeta& t = tensor(key);
  if (!t.dtype)
    throw UnsupportedError(Where(in_->path, std::nullopt, key), "dtype " + t.dtype_name + " unknown to this version");
  if (opaque_type(in_->ck, t))
    throw UnsupportedError(Where(in_->path, std::nullopt, key),
                           "a " + t.dtype_name + " tensor is stored in blocks dcpctl does not decode");
  Box box{offsets, sizes};
  check_box(t, box);
  require_tiled(*in_, t);
  const size_t n = box.numel() * itemsize(*t.dtype);
  std::unique_ptr<uint8_t[]> buf(new uint8_t[std::max<size_t>(n, 1)]);
  BoxReadOptions o;
  o.budget = max_memory_;
  o.threads = threads_;
  o.complete_records = check_records;
  {
    nb::gil_scoped_release release;
    read_box(*in_->reader, t, box, buf.get(), o);
  }
  uint8_t* data = buf.release();
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<uint8_t*>(p); });
  return nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>(data, {n}, owner);
}

void OpenCheckpoint::close() {
  std::unique_lock lock(mu_);
  in_.reset();
}

void bind_checkpoint(nb::module_& m) {
  nb::class_<OpenCheckpoint>(m, "_Checkpoint")
      .def(nb::init<const std::string&, uint64_t, unsigned>(), nb::arg("path"), nb::arg("max_memory"),
           nb::arg("threads"), nb::call_guard<nb::gil_scoped_release>())
      .def("keys", &OpenCheckpoint::keys)
      .def("values", &OpenCheckpoint::values)
      .def("contains", &OpenCheckpoint::contains)
      .def("info", &OpenCheckpoint::info)
      .def("read", &OpenCheckpoint::read, nb::arg("key"), nb::arg("offsets"), nb::arg("sizes"),
           nb::arg("check_records"))
      .def("value", &OpenCheckpoint::value)
      .def("describe", &OpenCheckpoint::describe)
      .def("close", &OpenCheckpoint::close, nb::call_guard<nb::gil_scoped_release>());
}

}  // namespace dcpctl::py
