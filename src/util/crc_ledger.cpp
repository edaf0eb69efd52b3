#include "util/crc_ledger.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>

#include "util/crc32.h"
#include "util/error.h"

namespace dcpctl {

uint32_t crc32_combine(uint32_t a, uint32_t b, uint64_t nb) {
  return static_cast<uint32_t>(::crc32_combine64(a, b, static_cast<z_off64_t>(nb)));
}

namespace {

std::string hex32(uint32_t v) {
  char s[11];
  std::snprintf(s, sizeof s, "0x%08x", v);
  return s;
}

// Removes [from, to) from `claimed` where already there, adds the rest, and returns the rest.
std::vector<std::pair<uint64_t, uint64_t>> claim(std::vector<std::pair<uint64_t, uint64_t>>& claimed, uint64_t from,
                                                 uint64_t to) {
  std::vector<std::pair<uint64_t, uint64_t>> fresh;
  uint64_t at = from;
  for (const auto& [a, b] : claimed) {
    if (b <= at) continue;
    if (a >= to) break;
    if (a > at) fresh.emplace_back(at, a);
    at = std::max(at, b);
    if (at >= to) break;
  }
  if (at < to) fresh.emplace_back(at, to);
  if (fresh.empty()) return fresh;
  claimed.insert(claimed.end(), fresh.begin(), fresh.end());
  std::sort(claimed.begin(), claimed.end());
  std::vector<std::pair<uint64_t, uint64_t>> merged;
  for (const auto& iv : claimed) {
    if (!merged.empty() && iv.first <= merged.back().second)
      merged.back().second = std::max(merged.back().second, iv.second);
    else
      merged.push_back(iv);
  }
  claimed.swap(merged);
  return fresh;
}

}  // namespace

void CrcLedger::watch(const std::string& path, uint64_t offset, uint64_t n, uint32_t crc, const std::string& key,
                      const std::string& record) {
  if (n == 0) {  // nothing to read: the CRC of no bytes is 0
    if (crc != 0)
      throw CorruptError(Where(path, offset, key), "record '" + record + "' is empty but its stored CRC-32 is " +
                                                       hex32(crc) + ": the checkpoint is damaged");
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = records_.lower_bound(offset);
  if (it != records_.end() && it->first == offset && it->second.n == n) return;
  bool overlaps = (it != records_.end() && it->first < offset + n) ||
                  (it != records_.begin() && std::prev(it)->first + std::prev(it)->second.n > offset);
  if (overlaps)
    throw FormatError(Where(path, offset, key), "record '" + record + "' overlaps another record of the file");
  Record r;
  r.n = n;
  r.crc = crc;
  r.key = key;
  r.record = record;
  records_.emplace_hint(it, offset, std::move(r));
  live_ = records_.size();
}

bool CrcLedger::watching(uint64_t offset, uint64_t n) const {
  if (live_.load() == 0 || n == 0) return false;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = records_.lower_bound(offset);
  if (it != records_.end() && it->first < offset + n) return true;
  return it != records_.begin() && std::prev(it)->first + std::prev(it)->second.n > offset;
}

void CrcLedger::saw(const std::string& path, uint64_t offset, const uint8_t* data, uint64_t n) {
  if (live_.load() == 0 || n == 0) return;
  struct Work {
    uint64_t record, from, to;  // the record's offset; the range within it
  };
  std::vector<Work> work;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = records_.lower_bound(offset);
    if (it != records_.begin() && std::prev(it)->first + std::prev(it)->second.n > offset) --it;
    for (; it != records_.end() && it->first < offset + n; ++it) {
      uint64_t from = std::max(offset, it->first) - it->first;
      uint64_t to = std::min(offset + n, it->first + it->second.n) - it->first;
      for (const auto& [a, b] : claim(it->second.claimed, from, to)) work.push_back({it->first, a, b});
    }
  }
  if (work.empty()) return;
  std::vector<uint32_t> crcs(work.size());
  for (size_t i = 0; i < work.size(); ++i)
    crcs[i] = crc32_update(0, data + (work[i].record + work[i].from - offset), work[i].to - work[i].from);
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < work.size(); ++i) {
    auto it = records_.find(work[i].record);
    if (it == records_.end()) continue;  // cannot happen: a record goes only once all its pieces are in
    Record& r = it->second;
    r.pieces.push_back({work[i].from, work[i].to - work[i].from, crcs[i]});
    r.done += work[i].to - work[i].from;
    if (r.done == r.n) finish(path, it->first, r);  // throws on a mismatch
  }
}

void CrcLedger::finish(const std::string& path, uint64_t offset, Record& r) {
  std::sort(r.pieces.begin(), r.pieces.end(), [](const Piece& a, const Piece& b) { return a.from < b.from; });
  uint32_t crc = 0;
  for (const Piece& p : r.pieces) crc = crc32_combine(crc, p.crc, p.n);
  uint32_t want = r.crc;
  uint64_t n = r.n;
  std::string key = r.key, record = r.record;
  records_.erase(offset);
  live_ = records_.size();
  ++checked_;
  if (crc != want) throw_crc_mismatch(Where(path, offset, key), record, n, want, crc);
}

void throw_crc_mismatch(const Where& where, const std::string& record, uint64_t n, uint32_t stored, uint32_t got) {
  throw CorruptError(where, "record '" + record + "' (" + std::to_string(n) +
                                " bytes) fails its CRC-32 check: stored " + hex32(stored) + ", its bytes give " +
                                hex32(got) + "; the checkpoint is damaged (restore it from a good copy)");
}

}  // namespace dcpctl
