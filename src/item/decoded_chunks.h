// Decoded chunks shared by the reads that need them.
//
// A chunk that cannot be read in place (a stream-transformed item such as zstd, or a saved view
// that is not contiguous) is decoded whole for every read of any part of it: resharding one zstd
// chunk into M target chunks decoded it M times, and stats decoded it once per window. When the
// reads are known in advance (expect, once per use to come; done when that use is over), the
// first read decodes the chunk into memory taken from the gate, the later ones copy out of it,
// and the last done frees it. The memory is taken without waiting (try_acquire): the reading
// threads hold reservations of their own and must not wait on the gate a second time. When it
// does not fit, or there is no gate, each read decodes for itself (the callers' reservations
// count that). Reads of one chunk arriving while it is being decoded wait for that decode. An
// expected chunk that can be read in place after all (an untransformed item with a contiguous
// view: callers that cannot tell beforehand expect every chunk) is read from its file, its run
// looked up once, and never kept. Safe to use from several threads. Used through LocalChunks
// (item/chunk_source.h) by reshard and by diff/stats windows (item/window.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "item/item_reader.h"
#include "util/memory_gate.h"

namespace dcpctl {

class DecodedChunks {
 public:
  // `gate` null: nothing is kept, every read decodes for itself.
  DecodedChunks(const ItemReader& reader, MemoryGate* gate) : reader_(reader), gate_(gate) {}
  ~DecodedChunks();
  DecodedChunks(const DecodedChunks&) = delete;
  DecodedChunks& operator=(const DecodedChunks&) = delete;

  // One more use of chunk `chunk` of `t` will come (a use may read it several times).
  void expect(const TensorMeta& t, size_t chunk);
  // Bytes [from, from + n) of the dense chunk into dst, as ItemReader::read_chunk_bytes: from the
  // kept copy, or by decoding it (kept when at least two uses remain and it fits in the gate).
  // An expected chunk readable in place is read from its file; an untransformed chunk nobody
  // expected is read as read_chunk_bytes reads it.
  void read(const TensorMeta& t, size_t chunk, uint64_t from, uint64_t n, uint8_t* dst);
  // One expected use of the chunk is over; after the last, the kept copy is freed.
  void done(const TensorMeta& t, size_t chunk);
  // Whole decodes so far: chunks kept for several uses, plus reads that decoded for themselves
  // (of transformed or expected chunks).
  uint64_t decodes() const { return decodes_.load(); }

 private:
  struct Entry {
    std::mutex mu;
    uint64_t uses = 0;                // expected uses not yet done
    std::unique_ptr<uint8_t[]> data;  // the dense chunk, while uses remain
    uint64_t charged = 0;             // bytes of the gate `data` holds
    bool looked_up = false;           // whether `run` is known
    std::optional<DirectRun> run;     // the chunk's bytes in place in a file, when they are
  };
  Entry* find(const TensorMeta& t, size_t chunk);

  const ItemReader& reader_;
  MemoryGate* gate_;
  std::mutex mu_;
  std::map<std::pair<const TensorMeta*, size_t>, std::unique_ptr<Entry>> entries_;
  std::atomic<uint64_t> decodes_{0};
};

}  // namespace dcpctl
