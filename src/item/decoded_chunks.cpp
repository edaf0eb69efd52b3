#include "item/decoded_chunks.h"

#include <cstring>

#include "util/dtype.h"
#include "util/error.h"

namespace dcpctl {

DecodedChunks::~DecodedChunks() {
  for (auto& [key, e] : entries_)
    if (e->charged) gate_.release(e->charged);
}

void DecodedChunks::expect(const TensorMeta& t, size_t chunk) {
  if (t.storage.at(chunk).transforms == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto& e = entries_[{&t, chunk}];
  if (!e) e = std::make_unique<Entry>();
  ++e->uses;
}

DecodedChunks::Entry* DecodedChunks::find(const TensorMeta& t, size_t chunk) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find({&t, chunk});
  return it == entries_.end() ? nullptr : it->second.get();
}

void DecodedChunks::read(const TensorMeta& t, size_t chunk, uint64_t from, uint64_t n, uint8_t* dst) {
  bool transformed = t.storage.at(chunk).transforms != 0;
  uint64_t total = t.chunk_numel(chunk) * itemsize(*t.dtype);
  if (from > total || n > total - from)
    throw Error(Where(reader_.checkpoint().metadata_path, std::nullopt, t.fqn),
                "internal: bytes [" + std::to_string(from) + ", +" + std::to_string(n) + ") of a chunk of " + std::to_string(total));
  Entry* e = transformed ? find(t, chunk) : nullptr;
  if (e) {
    std::unique_lock<std::mutex> lock(e->mu);
    if (!e->data && e->uses >= 2) {
      uint64_t bytes = total;
      if (gate_.try_acquire(bytes)) {
        try {
          e->data.reset(new uint8_t[bytes]);
          reader_.read_chunk(t, chunk, e->data.get());
        } catch (...) {
          e->data.reset();
          gate_.release(bytes);
          throw;
        }
        e->charged = bytes;
        ++decodes_;
      }
    }
    if (e->uses) --e->uses;
    if (e->data) {
      std::memcpy(dst, e->data.get() + from, n);
      if (e->uses == 0) {
        e->data.reset();
        gate_.release(e->charged);
        e->charged = 0;
      }
      return;
    }
  }
  if (transformed) ++decodes_;
  reader_.read_chunk_bytes(t, chunk, from, n, dst);
}

}  // namespace dcpctl
