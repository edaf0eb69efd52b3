#include "meta/derived.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "meta/pieces.h"

namespace dcpctl {

const DerivedTable::Entry* DerivedTable::find(const std::string& fqn) const {
  auto it = tensors.find(fqn);
  return it == tensors.end() ? nullptr : &it->second;
}

const MappedTensor* DerivedTable::parts_of(const std::string& fqn) const {
  auto it = parts.find(fqn);
  return it == parts.end() ? nullptr : it->second;
}

uint64_t DerivedTable::working_bytes(const TensorMeta& t, size_t chunk) const {
  const Entry* e = find(t.fqn);
  if (!e) return 0;
  // The read's own holdings stay while it reads its inputs one read at a time: the largest of
  // those reads adds to them. Any chunk of an input, not only `chunk`'s: a quantized weight reads
  // the block rows around its chunk, a mapped tensor its parts' chunks.
  uint64_t below = 0;
  if (e->inputs)
    for (const TensorMeta* in : e->tensor->inputs()) {
      // A saved input's reads hold nothing: asked once, not once for each of its chunks (a stack of
      // experts under EP x FSDP has 2,048, and each of its 384 outputs asks).
      if (!e->inputs->find(in->fqn)) continue;
      for (size_t c = 0; c < in->num_chunks(); ++c) below = std::max(below, e->inputs->working_bytes(*in, c));
    }
  const uint64_t own = e->tensor->working_bytes(chunk);
  return own > UINT64_MAX - below ? UINT64_MAX : own + below;
}

std::shared_ptr<DerivedTable> table_over(const std::shared_ptr<const DerivedTable>& below,
                                         const std::function<std::string(const std::string&)>& rename) {
  auto table = std::make_shared<DerivedTable>();
  if (!below) return table;
  table->views = below->views;
  table->output = below->output;
  for (const auto& [name, entry] : below->tensors) {
    std::string to = rename ? rename(name) : name;
    if (!to.empty()) table->tensors.emplace(std::move(to), entry);
  }
  return table;
}

uint64_t checked_range(const Where& where, const std::string& label, uint64_t bytes, uint64_t from, uint64_t n) {
  if (n == UINT64_MAX) n = bytes - std::min(from, bytes);
  if (from > bytes || n > bytes - from)
    throw FormatError(where, label + ": bytes [" + std::to_string(from) + ", +" + std::to_string(n) + ") asked of " +
                                 std::to_string(bytes) + " bytes");
  return n;
}

void read_part(const Where& where, const std::string& label, uint64_t bytes, uint64_t from, uint64_t n, void* dst,
               const std::function<void(uint8_t*)>& compute) {
  n = checked_range(where, label, bytes, from, n);
  if (n == 0) return;
  if (from == 0 && n == bytes) return compute(static_cast<uint8_t*>(dst));
  std::vector<uint8_t> own(bytes);
  compute(own.data());
  std::memcpy(dst, own.data() + from, n);
}

std::vector<uint8_t> read_box(const TensorReads& below, const TensorMeta& t, const Box& box) {
  const size_t item = itemsize(*t.dtype);
  std::vector<uint8_t> out(box.numel() * item), part;
  for (size_t c = 0; c < t.num_chunks(); ++c) {
    const Box cb = chunk_box(t, c);
    Box in;
    if (!intersect(cb, box, in)) continue;
    Box local = in;
    for (size_t d = 0; d < local.offsets.size(); ++d) local.offsets[d] -= cb.offsets[d];
    if (is_run(local, cb.sizes)) {
      part.resize(in.numel() * item);
      below.read(t, c, first_element(local, cb.sizes) * item, part.size(), part.data());
      copy_box(part.data(), in, out.data(), box, in, item);
    } else {
      part.resize(t.chunk_numel(c) * item);
      below.read(t, c, 0, part.size(), part.data());
      copy_box(part.data(), cb, out.data(), box, in, item);
    }
  }
  return out;
}

}  // namespace dcpctl
