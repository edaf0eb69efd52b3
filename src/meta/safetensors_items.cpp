// DCP saved with FileSystemWriter(serialization_format=SerializationFormat.SAFETENSORS).
//
// torch's _write_files_from_queue (filesystem.py, 2.8+) writes a file's non-tensor items first
// (torch.save blobs, as usual), then ONE safetensors blob holding every tensor of the file keyed
// by its fqn, with __metadata__ {"DCP_SHARDING_INFO": json {fqn: {"saved_offsets": [..]}},
// "DCP_VERSION": "1.0", "format": "pt"}. Each tensor's _StorageInfo records offset = the blob's
// start (the stream position before the blob was written) and length = the tensor's byte count,
// so in `.metadata` all tensor items of a file share one offset. torch's own FileSystemReader
// then fails to read them (it expects a torch.save zip there). Here each tensor item is pointed
// at its own bytes in the blob's data section (ItemFormat::Raw), checked against the header:
// the same dtype, the chunk's shape, the chunk's offsets in DCP_SHARDING_INFO, the byte count.
#include <map>

#include "meta/layouts.h"
#include "meta/safetensors_header.h"
#include "store/file.h"

namespace dcpctl::meta_detail {

namespace {

std::string dims_text(const int64_t* d, size_t n) {
  std::string s = "[";
  for (size_t i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

}  // namespace

void resolve_safetensors_items(Checkpoint& ck) {
  Metadata& md = ck.md;
  // Per file: the lowest offset of an untransformed tensor item (where a blob would start).
  std::vector<uint64_t> first(md.files.size(), UINT64_MAX);
  for (const auto& t : md.tensors)
    for (const auto& r : t.storage)
      if (r.present() && r.transforms == 0 && r.format == ItemFormat::TorchSave)
        first[r.file] = std::min(first[r.file], r.offset);

  std::vector<std::optional<SafetensorsHeader>> headers(md.files.size());
  bool any = false;
  for (uint32_t f = 0; f < md.files.size(); ++f) {
    if (first[f] == UINT64_MAX || !ck.files[f].size || first[f] + 8 > *ck.files[f].size) continue;
    ReadFile file(ck.path_of(f));
    uint8_t magic[8];
    file.read_at(first[f], magic, 8);
    if (magic[0] == 'P' && magic[1] == 'K') continue;  // a torch.save zip: the ordinary layout
    // Anything else is either a safetensors blob or damage, which the item reader reports.
    try {
      SafetensorsHeader h = read_safetensors_header(file, first[f], file.size() - first[f]);
      if (!h.metadata.count("DCP_SHARDING_INFO") && !h.metadata.count("DCP_VERSION")) continue;
      headers[f] = std::move(h);
      any = true;
    } catch (const FormatError&) {
      continue;
    }
  }
  if (!any) return;
  ck.layout = CheckpointLayout::DcpSafetensorsItems;

  std::vector<std::map<std::string, std::vector<int64_t>>> sharding(md.files.size());
  for (uint32_t f = 0; f < md.files.size(); ++f) {
    if (!headers[f]) continue;
    try {
      sharding[f] = dcp_sharding_info(*headers[f], ck.path_of(f));
    } catch (const FormatError& e) {
      md.problems.push_back({"safetensors-item-mismatch", e.where(), e.detail()});
    }
  }
  for (auto& t : md.tensors) {
    for (size_t c = 0; c < t.num_chunks(); ++c) {
      StorageRef& r = t.storage[c];
      if (!r.present() || !headers[r.file] || r.transforms != 0) continue;
      const SafetensorsHeader& h = *headers[r.file];
      Where where(ck.path_of(r.file), h.data_start, t.fqn);
      const SafetensorsTensorInfo* e = h.find(t.fqn);
      std::string why;
      if (!e) {
        why = "the file's safetensors blob has no tensor of this name";
      } else if (t.dtype && e->dtype != t.dtype) {
        why = "the safetensors blob holds " + e->dtype_name + " but .metadata says " + t.dtype_name;
      } else if (e->shape.size() != t.ndim() || !std::equal(e->shape.begin(), e->shape.end(), t.chunk_sizes(c))) {
        why = "the safetensors blob holds shape " + dims_text(e->shape.data(), e->shape.size()) + " but chunk " +
              std::to_string(c) + " is " + dims_text(t.chunk_sizes(c), t.ndim());
      } else if (auto s = sharding[r.file].find(t.fqn);
                 s != sharding[r.file].end() && (s->second.size() != t.ndim() ||
                                                 !std::equal(s->second.begin(), s->second.end(), t.chunk_offsets(c)))) {
        why = "DCP_SHARDING_INFO gives offsets " + dims_text(s->second.data(), s->second.size()) + " but chunk " +
              std::to_string(c) + " is at " + dims_text(t.chunk_offsets(c), t.ndim());
      } else if (e->end - e->begin != r.length) {
        why = "the safetensors blob holds " + std::to_string(e->end - e->begin) + " bytes but .metadata says " +
              std::to_string(r.length);
      }
      if (!why.empty()) {
        md.problems.push_back({"safetensors-item-mismatch", where, why});
        continue;
      }
      r.offset = h.data_start + e->begin;
      r.format = ItemFormat::Raw;
    }
  }
}

}  // namespace dcpctl::meta_detail
