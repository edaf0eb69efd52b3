#include "item/decoded_chunks.h"

#include <cstring>

#include "util/dtype.h"
#include "util/error.h"

namespace dcpctl {

DecodedChunks::~DecodedChunks() {
  for (auto& [key, e] : entries_)
    if (e->charged) gate_->release(e->charged);
}

void DecodedChunks::expect(const TensorMeta& t, size_t chunk) {
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
  uint64_t total = t.chunk_numel(chunk) * itemsize(*t.dtype);
  if (from > total || n > total - from)
    throw Error(Where(reader_.checkpoint().metadata_path, std::nullopt, t.fqn),
                "internal: bytes [" + std::to_string(from) + ", +" + std::to_string(n) + ") of a chunk of " +
                    std::to_string(total));
  Entry* e = find(t, chunk);
  if (e) {
    std::unique_lock<std::mutex> lock(e->mu);
    if (!e->looked_up) {
      e->run = reader_.direct_run(t, chunk);
      e->looked_up = true;
    }
    if (e->run) {
      const DirectRun run = *e->run;
      lock.unlock();
      run.file->read_at(run.offset + from, dst, n, t.fqn);
      return;
    }
    if (!e->data && e->uses >= 2 && gate_ && gate_->try_acquire(total)) {
      try {
        e->data.reset(new uint8_t[total]);
        reader_.read_chunk(t, chunk, e->data.get());
      } catch (...) {
        e->data.reset();
        gate_->release(total);
        throw;
      }
      e->charged = total;
      ++decodes_;
    }
    if (e->data) {
      std::memcpy(dst, e->data.get() + from, n);
      return;
    }
  }
  if (e || t.storage.at(chunk).transforms != 0) ++decodes_;
  reader_.read_chunk_bytes(t, chunk, from, n, dst);
}

void DecodedChunks::done(const TensorMeta& t, size_t chunk) {
  Entry* e = find(t, chunk);
  if (!e) return;
  std::lock_guard<std::mutex> lock(e->mu);
  if (e->uses && --e->uses == 0 && e->data) {
    e->data.reset();
    gate_->release(e->charged);
    e->charged = 0;
  }
}

}  // namespace dcpctl
