#include "write/tensor_hash.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>

#include <sys/stat.h>

#include "meta/manifest.h"
#include "plan/plan.h"
#include "store/file.h"
#include "util/crc_ledger.h"
#include "util/sha256.h"
#include "write/write_hash.h"

namespace dcpctl {

namespace {

std::atomic<uint64_t> g_held{0};  // bytes kept by every WriteHash and tensor (kHeldBudget)

struct TensorPart {
  uint64_t length = 0;
  std::string temp, final_path;  // its file, before and after the rename
  uint64_t offset = 0;           // in that file
  bool located = false;
  std::vector<uint8_t> kept;  // its first bytes, while an earlier part is not hashed yet
  bool dropped = false;       // past the budget: read back
};

struct TensorChain {
  std::mutex mu;
  std::condition_variable turn;  // the hashed position moved (claims wait for it)
  std::vector<TensorPart> parts;
  std::vector<uint64_t> starts;  // each part's place in the tensor's bytes
  Sha256 h;
  size_t cur = 0;        // the part being hashed; every earlier one is
  uint64_t fed = 0;      // its bytes hashed
  uint64_t claimed = 0;  // the tensor's bytes claimed (claim_part_bytes) up to here
  bool broken = false;   // a file written twice: every part read back
  bool crc = false;      // CRC-32 (write/write_hash.h): the pieces below, not h
  struct CrcPiece {
    uint64_t pos = 0, n = 0;  // in the tensor's bytes
    uint32_t crc = 0;
  };
  std::vector<CrcPiece> crcs;

  uint64_t hashed_to() const { return cur < parts.size() ? starts[cur] + fed : starts.back(); }
  uint64_t claimed_to() const { return std::max(claimed, hashed_to()); }

  void advance() {  // past the parts done, hashing the kept ones that follow
    while (cur < parts.size() && fed == parts[cur].length) {
      ++cur;
      fed = 0;
      if (cur == parts.size()) return;
      TensorPart& p = parts[cur];
      if (p.dropped || p.kept.empty()) continue;  // (a loop pass with fed < length ends it)
      h.update(p.kept.data(), p.kept.size());
      fed = p.kept.size();
      release_bytes(p.kept.size());
      std::vector<uint8_t>().swap(p.kept);
    }
  }
  void drop_kept() {
    for (TensorPart& p : parts) {
      release_bytes(p.kept.size());
      std::vector<uint8_t>().swap(p.kept);
    }
  }
};

struct TensorRegistry {
  std::mutex mu;
  std::map<std::string, std::unique_ptr<TensorChain>> chains;
};
TensorRegistry& tensor_registry() {
  static TensorRegistry r;
  return r;
}
TensorChain* chain_of(const std::string& key) {
  TensorRegistry& r = tensor_registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.chains.find(key);
  return it == r.chains.end() ? nullptr : it->second.get();
}

std::string part_file(const TensorPart& p) {
  struct stat st;
  return ::stat(p.temp.c_str(), &st) == 0 ? p.temp : p.final_path;
}

}  // namespace

bool hold_bytes(uint64_t n) {
  uint64_t held = g_held.load();
  while (held + n <= kHeldBudget && !g_held.compare_exchange_weak(held, held + n)) {
  }
  return held + n <= kHeldBudget;
}
void release_bytes(uint64_t n) {
  g_held -= n;
}

void forget_declared_tensors() {
  TensorRegistry& r = tensor_registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (auto& [key, c] : r.chains) c->drop_kept();
  r.chains.clear();
}

void declare_tensor(const std::string& key, const std::vector<uint64_t>& part_lengths) {
  if (!hashing_writes()) return;
  auto c = std::make_unique<TensorChain>();
  c->parts.resize(part_lengths.size());
  c->starts.assign(1, 0);
  for (size_t i = 0; i < part_lengths.size(); ++i) {
    c->parts[i].length = part_lengths[i];
    c->starts.push_back(c->starts.back() + part_lengths[i]);
  }
  c->advance();  // past empty parts
  c->crc = hashing_algorithm() == ManifestAlgorithm::Crc32;
  TensorRegistry& r = tensor_registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.chains[key] = std::move(c);
}

std::vector<HashPart> declare_planned_tensors(const WritePlan& plan) {
  std::vector<HashPart> parts(plan.records.size());
  if (!hashing_writes()) return parts;
  for (const PlannedTensor& pt : plan.tensors) {
    // Each box whole but along dimension 0, each starting where the one before ends.
    const std::vector<int64_t>& shape = pt.t->shape;
    int64_t row = 0;
    bool c_order = true;
    std::vector<uint64_t> lengths;
    for (size_t ri : pt.records) {
      const Box& b = plan.records[ri].box;
      c_order = c_order && b.sizes.size() == shape.size();
      for (size_t d = 0; c_order && d < shape.size(); ++d)
        c_order = d == 0 ? b.offsets[0] == row : b.offsets[d] == 0 && b.sizes[d] == shape[d];
      if (!c_order) break;
      if (!shape.empty()) row += b.sizes[0];
      lengths.push_back(plan.records[ri].out_bytes);
    }
    if (!c_order || (!shape.empty() && row != shape[0]) || (shape.empty() && pt.records.size() != 1)) continue;
    declare_tensor(pt.key, lengths);
    for (size_t k = 0; k < pt.records.size(); ++k) parts[pt.records[k]] = {pt.key, static_cast<uint32_t>(k)};
  }
  return parts;
}

void locate_part(const HashPart& p, const std::string& temp_path, const std::string& final_path, uint64_t offset) {
  TensorChain* c = chain_of(p.tensor);
  if (!c) return;
  std::lock_guard<std::mutex> lock(c->mu);
  if (p.part >= c->parts.size()) return void(c->broken = true);
  TensorPart& part = c->parts[p.part];
  if (part.located && (part.offset != offset || part.temp != temp_path)) c->broken = true;  // two places
  part.temp = temp_path;
  part.final_path = final_path;
  part.offset = offset;
  part.located = true;
}

bool claim_part_bytes(const HashPart& p, uint64_t at, uint64_t n) {
  TensorChain* c = chain_of(p.tensor);
  if (!c || n == 0) return false;
  std::lock_guard<std::mutex> lock(c->mu);
  if (c->broken || p.part >= c->parts.size() || at + n > c->parts[p.part].length) return false;
  if (c->starts[p.part] + at != c->claimed_to()) return false;
  c->claimed = c->starts[p.part] + at + n;
  return true;
}

void hash_claimed(const HashPart& p, uint64_t at, const uint8_t* data, uint64_t n) {
  TensorChain* c = chain_of(p.tensor);
  if (!c || n == 0) return;
  const uint64_t pos = c->starts[p.part] + at;
  std::unique_lock<std::mutex> lock(c->mu);
  // The claims before this one are hashed by the threads that made them, in order.
  if (!c->turn.wait_for(lock, kTurnWait, [&] { return c->broken || c->hashed_to() == pos; })) c->broken = true;
  if (c->broken) return c->turn.notify_all();
  lock.unlock();
  c->h.update(data, n);  // alone: the next claim waits for the position, the rest for nothing
  lock.lock();
  c->fed += n;
  c->advance();
  c->turn.notify_all();
}

void hash_part_bytes(const HashPart& p, uint64_t at, const uint8_t* data, uint64_t n) {
  if (claim_part_bytes(p, at, n)) return hash_claimed(p, at, data, n);
  TensorChain* c = chain_of(p.tensor);
  if (!c || n == 0) return;
  std::unique_lock<std::mutex> lock(c->mu);
  if (c->broken || p.part >= c->parts.size()) return;
  TensorPart& part = c->parts[p.part];
  const uint64_t pos = c->starts[p.part] + at;
  if (p.part <= c->cur || pos < c->claimed_to() || (!part.dropped && at != part.kept.size())) {
    c->broken = true;  // shown twice, or out of order within a part: read back
    return;
  }
  if (part.dropped) return;
  if (!hold_bytes(n)) {
    // Past the budget. Where every part before it is being written (rank files written side by
    // side: part 0 in one, part 1 in the next), wait for them to be claimed (at most kTurnWait)
    // and hash these bytes from the writer's buffer, rather than read the part back.
    bool coming = true;
    for (uint32_t k = 0; k < p.part; ++k) coming = coming && (c->parts[k].located || c->parts[k].length == 0);
    if (coming && c->turn.wait_for(lock, kTurnWait, [&] { return c->broken || c->claimed_to() == pos; }) &&
        !c->broken) {
      c->claimed = pos + n;
      lock.unlock();
      return hash_claimed(p, at, data, n);
    }
    if (c->broken) return;
    part.dropped = true;
    release_bytes(part.kept.size());
    std::vector<uint8_t>().swap(part.kept);
    return;
  }
  part.kept.insert(part.kept.end(), data, data + n);
}

void crc_part_bytes(const HashPart& p, uint64_t at, uint64_t n, uint32_t crc) {
  TensorChain* c = chain_of(p.tensor);
  if (!c || n == 0) return;
  std::lock_guard<std::mutex> lock(c->mu);
  if (c->broken || p.part >= c->parts.size() || at + n > c->parts[p.part].length) return void(c->broken = true);
  const uint64_t pos = c->starts[p.part] + at;
  if (!c->crcs.empty() && c->crcs.back().pos + c->crcs.back().n == pos) {  // continues the last: joined now
    c->crcs.back().crc = crc32_combine(c->crcs.back().crc, crc, n);
    c->crcs.back().n += n;
    return;
  }
  c->crcs.push_back({pos, n, crc});
}

void part_rewritten(const HashPart& p) {
  TensorChain* c = chain_of(p.tensor);
  if (!c) return;
  std::lock_guard<std::mutex> lock(c->mu);
  c->broken = true;
  c->turn.notify_all();
}

std::optional<std::string> declared_tensor_digest(const std::string& key, uint64_t& read) {
  TensorChain* c = chain_of(key);
  if (!c) return std::nullopt;
  std::lock_guard<std::mutex> lock(c->mu);
  for (const TensorPart& p : c->parts)
    if (p.length && !p.located) return std::nullopt;  // never written: not this run's
  auto read_part = [&](const TensorPart& p, uint64_t from, Sha256& h) {
    ReadFile f(part_file(p));
    hash_file_range(f, p.offset + from, p.offset + p.length, h);
    read += p.length - from;
  };
  if (c->crc) {
    // The CRC of the tensor's bytes [from, to), read back from its parts' files.
    auto read_crc = [&](uint64_t from, uint64_t to) {
      uint32_t crc = 0;
      bool first = true;
      for (size_t k = 0; k < c->parts.size(); ++k) {
        const uint64_t a = std::max(from, c->starts[k]), b = std::min(to, c->starts[k + 1]);
        if (a >= b) continue;
        const TensorPart& p = c->parts[k];
        const uint32_t got =
            crc_file_range(ReadFile(part_file(p)), p.offset + (a - c->starts[k]), p.offset + (b - c->starts[k]));
        crc = first ? got : crc32_combine(crc, got, b - a);
        first = false;
        read += b - a;
      }
      return crc;
    };
    std::sort(c->crcs.begin(), c->crcs.end(), [](const auto& a, const auto& b) { return a.pos < b.pos; });
    const uint64_t total = c->starts.back();
    uint64_t end = 0;
    for (const auto& piece : c->crcs) {
      c->broken = c->broken || piece.pos < end;  // a byte shown twice
      end = std::max(end, piece.pos + piece.n);
    }
    uint32_t crc = 0;
    uint64_t at = 0;
    auto join = [&](uint32_t got, uint64_t n) {
      crc = at == 0 ? got : crc32_combine(crc, got, n);
      at += n;
    };
    if (c->broken || end > total) {
      if (total) join(read_crc(0, total), total);
    } else {
      for (const auto& piece : c->crcs) {
        if (piece.n == 0) continue;
        if (piece.pos > at) join(read_crc(at, piece.pos), piece.pos - at);
        join(piece.crc, piece.n);
      }
      if (at < total) join(read_crc(at, total), total - at);
    }
    c->crcs.clear();
    return crc32_hex(crc);
  }
  if (c->broken) {
    c->drop_kept();
    Sha256 h;
    for (const TensorPart& p : c->parts) read_part(p, 0, h);
    return h.hex();
  }
  while (c->cur < c->parts.size()) {  // what the writes did not show in order: read back
    read_part(c->parts[c->cur], c->fed, c->h);
    c->fed = c->parts[c->cur].length;
    c->advance();
  }
  c->drop_kept();
  return c->h.hex();
}

std::optional<std::map<std::string, std::string>> written_tensor_digests(const WritePlan& plan, uint64_t* read_back) {
  std::map<std::string, std::string> out;
  uint64_t read = 0;
  for (const PlannedTensor& pt : plan.tensors) {
    std::optional<std::string> d = declared_tensor_digest(pt.key, read);
    if (!d) return std::nullopt;
    out[pt.key] = *d;
  }
  if (read_back) *read_back += read;
  return out;
}

}  // namespace dcpctl
