// Decoded chunks shared by the reads that need them.
//
// A chunk whose item is stream-transformed (zstd) is decoded whole for every read of any part of
// it: resharding one zstd chunk into M target chunks decoded it M times. When the reads are known
// in advance (expect, once per read to come), the first read decodes the chunk into memory taken
// from the gate, the later ones copy out of it, and the last one frees it. The memory is taken
// without waiting (try_acquire): the reading threads hold reservations of their own and must not
// wait on the gate a second time. When it does not fit, each read decodes for itself, as without
// this cache (the callers' reservations count that). Reads of one chunk arriving while it is
// being decoded wait for that decode. Safe to use from several threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "item/item_reader.h"
#include "util/memory_gate.h"

namespace dcpctl {

class DecodedChunks {
 public:
  DecodedChunks(const ItemReader& reader, MemoryGate& gate) : reader_(reader), gate_(gate) {}
  ~DecodedChunks();
  DecodedChunks(const DecodedChunks&) = delete;
  DecodedChunks& operator=(const DecodedChunks&) = delete;

  // One more read of chunk `chunk` of `t` will come. Only transformed chunks are kept; others are
  // read in place, and expecting them is a no-op.
  void expect(const TensorMeta& t, size_t chunk);
  // Bytes [from, from + n) of the dense chunk into dst (as ItemReader::read_chunk_bytes), counting
  // one expected read done.
  void read(const TensorMeta& t, size_t chunk, uint64_t from, uint64_t n, uint8_t* dst);
  // Whole decodes of transformed chunks so far (kept for several reads, or for one read alone).
  uint64_t decodes() const { return decodes_.load(); }

 private:
  struct Entry {
    std::mutex mu;
    uint64_t uses = 0;                // expected reads not yet done
    std::unique_ptr<uint8_t[]> data;  // the dense chunk, while reads remain
    uint64_t charged = 0;             // bytes of the gate `data` holds
  };
  Entry* find(const TensorMeta& t, size_t chunk);

  const ItemReader& reader_;
  MemoryGate& gate_;
  std::mutex mu_;
  std::map<std::pair<const TensorMeta*, size_t>, std::unique_ptr<Entry>> entries_;
  std::atomic<uint64_t> decodes_{0};
};

}  // namespace dcpctl
