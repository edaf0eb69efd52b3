#include "meta/shared_records.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

namespace dcpctl {

namespace {

struct Window {
  uint64_t offset, length;
  const std::string* key;
};

// Windows that must be judged together: one record, or one item several keys name.
struct Unit {
  uint64_t offset = 0, length = 0;
  bool record = false;  // a torch.save record (views inside it are legal)
  std::vector<const Window*> windows;
  uint64_t end() const { return offset + length; }
};

using SharedByKeys = std::map<std::vector<std::string>, SharedRecord>;  // by key set

// Every file's windows, of the files that exist: counted first (out.per_file), each file's vector
// reserved once (5 million chunks of a metadata-only copy cost no memory here).
std::vector<std::vector<Window>> file_windows(const Checkpoint& ck, WindowReport& out) {
  const Metadata& md = ck.md;
  out.per_file.assign(md.files.size(), 0);
  auto count = [&](const StorageRef& r) {
    if (r.present() && r.file < out.per_file.size()) ++out.per_file[r.file];
  };
  for (const auto& t : md.tensors)
    for (const auto& r : t.storage) count(r);
  for (const auto& b : md.bytes) count(b.storage);
  std::vector<std::vector<Window>> windows(md.files.size());
  std::vector<uint8_t> kept(md.files.size(), 0);
  bool any = false;
  for (size_t f = 0; f < windows.size(); ++f) {
    if (f >= ck.files.size() || !ck.files[f].size) continue;  // missing-file: judged by the caller
    kept[f] = 1;
    any = true;
    windows[f].reserve(out.per_file[f]);
  }
  auto window = [&](const StorageRef& r, const std::string& key) {
    if (r.present() && r.file < windows.size() && kept[r.file]) windows[r.file].push_back({r.offset, r.length, &key});
  };
  if (any) {
    for (const auto& t : md.tensors)
      for (const auto& r : t.storage) window(r, t.fqn);
    for (const auto& b : md.bytes) window(b.storage, b.fqn);
  }
  return windows;
}

// A file's windows (sorted) as units: those inside one CRC-watched record (`recs`: offset ->
// size) together, the others one per distinct window, sorted. A window past the file's end
// (`size` bytes) is a problem.
std::vector<Unit> units_of(const std::vector<Window>& ws, const std::map<uint64_t, uint64_t>& recs,
                           const std::string& path, uint64_t size, WindowReport& out) {
  std::map<uint64_t, Unit> in_records;  // by record offset
  std::vector<Unit> units;
  for (const Window& w : ws) {
    if (w.offset > size || w.length > size - w.offset) {
      out.problems.push_back({"window-out-of-file", Where(path, w.offset, *w.key),
                              "item of " + std::to_string(w.length) + " bytes runs past the end of the file (" +
                                  std::to_string(size) + " bytes)"});
    }
    if (w.length == 0) continue;
    if (auto it = recs.upper_bound(w.offset); it != recs.begin()) {
      --it;
      if (w.offset - it->first <= it->second && w.length <= it->second - (w.offset - it->first)) {
        Unit& u = in_records[it->first];
        u.offset = it->first, u.length = it->second, u.record = true;
        u.windows.push_back(&w);
        continue;
      }
    }
    if (!units.empty() && !units.back().record && units.back().offset == w.offset && units.back().length == w.length) {
      units.back().windows.push_back(&w);  // (sorted: the same window as the one before)
      continue;
    }
    units.push_back({w.offset, w.length, false, {&w}});
  }
  for (auto& [off, u] : in_records) units.push_back(std::move(u));
  std::sort(units.begin(), units.end(),
            [](const Unit& a, const Unit& b) { return std::tie(a.offset, a.length) < std::tie(b.offset, b.length); });
  return units;
}

// File f's units in order: one that starts inside another is an overlap; one several keys name is
// shared.
void judge_units(const std::vector<Unit>& units, size_t f, const std::string& path, WindowReport& out,
                 SharedByKeys& shared) {
  const Unit* reach = nullptr;  // the unit reaching furthest so far
  for (const Unit& u : units) {
    if (reach && u.offset < reach->end()) {
      const Window& w = *u.windows.front();
      const Window& other = *reach->windows.front();
      out.problems.push_back({"window-overlap", Where(path, w.offset, *w.key),
                              "item overlaps the item of '" + *other.key + "' at offset " +
                                  std::to_string(other.offset) +
                                  " (not the same item, nor views of one torch.save record)"});
    }
    if (!reach || u.end() > reach->end()) reach = &u;
    std::set<std::string> keys;
    bool same = true;
    for (const Window* w : u.windows) {
      keys.insert(*w->key);
      same = same && w->offset == u.windows.front()->offset && w->length == u.windows.front()->length;
    }
    if (keys.size() < 2) continue;
    std::vector<std::string> k(keys.begin(), keys.end());
    SharedRecord& s = shared[k];
    if (s.keys.empty()) s.keys = k;
    s.same_bytes = s.same_bytes && same;
    s.places.push_back({static_cast<uint32_t>(f), u.offset, u.length});
  }
}

}  // namespace

WindowReport check_windows(const Checkpoint& ck) {
  WindowReport out;
  const Metadata& md = ck.md;
  std::vector<std::vector<Window>> windows = file_windows(ck, out);
  // The CRC-watched records of each file, by offset (zip records never overlap; a record listed
  // once per key that names it is one record).
  std::vector<std::map<uint64_t, uint64_t>> records(md.files.size());
  for (const auto& r : ck.record_crcs)
    if (r.file < records.size() && r.size > 0) records[r.file].emplace(r.offset, r.size);
  // Shared units of every file, before merging by key set.
  SharedByKeys shared;
  for (size_t f = 0; f < windows.size(); ++f) {
    if (f >= ck.files.size() || !ck.files[f].size) continue;  // missing-file: judged by the caller
    const std::string path = ck.path_of(static_cast<uint32_t>(f));
    auto& ws = windows[f];
    std::sort(ws.begin(), ws.end(), [](const Window& a, const Window& b) {
      return std::tie(a.offset, a.length, *a.key) < std::tie(b.offset, b.length, *b.key);
    });
    judge_units(units_of(ws, records[f], path, *ck.files[f].size, out), f, path, out, shared);
  }
  for (auto& [k, s] : shared) out.shared.push_back(std::move(s));
  return out;
}

std::vector<std::optional<size_t>> same_data_as(const Metadata& md) {
  std::vector<std::optional<size_t>> out(md.tensors.size());
  // The signature of a tensor's data: dtype, shape, chunks and where each chunk's bytes lie.
  using Ref = std::tuple<uint32_t, uint32_t, uint64_t, uint64_t, int>;
  using Sig = std::tuple<std::string, std::vector<int64_t>, std::vector<int64_t>, std::vector<Ref>>;
  std::map<Sig, size_t> first;
  for (size_t i = 0; i < md.tensors.size(); ++i) {
    const TensorMeta& t = md.tensors[i];
    if (!t.dtype || t.storage.empty()) continue;
    std::vector<Ref> refs;
    bool placed = true;
    for (const StorageRef& r : t.storage) {
      placed = placed && r.present();
      refs.emplace_back(r.file, r.transforms, r.offset, r.length, static_cast<int>(r.format));
    }
    if (!placed) continue;
    auto [it, fresh] = first.emplace(Sig{t.dtype_name, t.shape, t.chunk_dims, std::move(refs)}, i);
    if (!fresh) out[i] = it->second;
  }
  return out;
}

std::string shared_text(const Checkpoint& ck, const SharedRecord& s) {
  std::string keys;
  for (size_t i = 0; i < s.keys.size(); ++i)
    keys += (i == 0 ? "" : i + 1 == s.keys.size() ? " and " : ", ") + ("'" + s.keys[i] + "'");
  std::set<uint32_t> files;
  for (const auto& p : s.places) files.insert(p.file);
  std::string where = files.size() == 1 ? "in " + ck.md.files.at(*files.begin())
                                        : "in each of " + std::to_string(files.size()) + " files";
  return keys +
         (s.same_bytes ? " are one stored record (the same bytes: a tie, torch.save's shared storage) "
                       : " are views of one stored record (torch.save's shared storage) ") +
         where + ": one record, its CRC-32 checked once; not an overlap";
}

}  // namespace dcpctl
