#include "meta/checkpoint.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <regex>

#include "meta/layouts.h"
#include "meta/readers.h"
#include "meta/run_folder.h"
#include "store/file.h"

namespace dcpctl {

using meta_detail::ends_with;

const char* layout_name(CheckpointLayout l) {
  return layout_reader(l).name;
}
const char* layout_description(CheckpointLayout l) {
  return layout_reader(l).description;
}

uint64_t Checkpoint::data_bytes() const {
  uint64_t n = 0;
  for (const auto& f : files) n += f.size.value_or(0);
  return n;
}

std::string Checkpoint::path_of(uint32_t file) const {
  return join_path(dir, md.files.at(file));
}

std::optional<RankTorchFile> rank_torch_file(const std::string& name) {
  static const std::regex kName(R"(model_world_size_(\d{1,7})_rank_(\d{1,7})\.pt)");
  std::smatch m;
  if (!std::regex_match(name, m, kName)) return std::nullopt;
  RankTorchFile f{std::stoi(m[1].str()), std::stoi(m[2].str())};
  if (f.world_size < 1) return std::nullopt;
  return f;
}

std::optional<int> rank_of_file(const std::string& p) {
  if (p.size() < 3 || p.compare(0, 2, "__") != 0) return std::nullopt;
  size_t i = 2;
  int r = 0;
  bool any = false;
  while (i < p.size() && p[i] >= '0' && p[i] <= '9' && r < 100000000) {
    r = r * 10 + (p[i++] - '0');
    any = true;
  }
  if (!any || i >= p.size() || p[i] != '_') return std::nullopt;
  return r;
}

void require_complete(const Checkpoint& ck) {
  if (ck.incomplete.empty()) return;
  std::string text;
  for (const auto& f : ck.incomplete) text += "\n  " + f.text();
  throw FormatError(Where(ck.dir), "the checkpoint is incomplete; refusing to write from it:" + text);
}

namespace meta_detail {

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

void stat_data_files(Checkpoint& ck) {
  ck.files.clear();
  for (const auto& rel : ck.md.files) {
    DataFileInfo fi;
    fi.relative_path = rel;
    std::string p = join_path(ck.dir, rel);
    if (rel.find("..") != std::string::npos || (!rel.empty() && rel[0] == '/')) {
      fi.error = "path leaves the checkpoint directory";
    } else if (PathInfo st = stat_path(p); st.kind == PathInfo::missing) {
      fi.missing = st.err == ENOENT || st.err == 0;
      fi.error = st.err ? errno_text(st.err) : std::string("no such object");
    } else if (st.kind != PathInfo::file) {
      fi.error = "not a regular file";
    } else {
      fi.size = st.size;
    }
    ck.files.push_back(std::move(fi));
  }
}

Checkpoint open_dcp(const std::string& dir, const std::vector<uint8_t>* metadata) {
  Checkpoint ck;
  ck.dir = dir;
  ck.metadata_path = join_path(dir, ".metadata");
  if (metadata) {
    ck.metadata_bytes = metadata->size();
    ck.md = parse_metadata(ByteSpan(metadata->data(), metadata->size()),
                           ck.metadata_path + " (received from another rank)");
  } else {
    MappedFile mf(ck.metadata_path);
    ck.metadata_bytes = mf.size();
    MetadataParseOptions po;
    po.consumed = [&mf](uint64_t done) { mf.drop_before(done); };
    ck.md = parse_metadata(mf.span(), ck.metadata_path, po);
  }
  ck.metadata_sources = {ck.metadata_path};
  stat_data_files(ck);
  resolve_safetensors_items(ck);
  return ck;
}

}  // namespace meta_detail

namespace {

// No row took the directory: say what it is not, or read the model inside a trainer's step folder.
Checkpoint open_unrecognised_dir(const Probe& p, const OpenOptions& options) {
  const std::string& dir = p.path;
  size_t distcp = p.ending(".distcp").size();
  std::string index = join_path(dir, "model.safetensors.index.json");
  std::string path = join_path(dir, ".metadata");
  if (distcp > 0)
    throw FormatError(Where(path), "missing, although the directory holds " + std::to_string(distcp) +
                                       " .distcp files: the save did not finish (the coordinator writes "
                                       ".metadata last), or this node lacks the shared filesystem copy");
  if (path_exists(index))
    throw FormatError(Where(index), "names the model's files, but the directory holds no .safetensors file");
  // A trainer's step folder (checkpoint-N/ with pytorch_model_fsdp_0/ or model/ inside): the
  // model checkpoint in it, incomplete when the trainer's own marker says the save did not finish.
  if (auto sf = step_folder(dir)) {
    OpenOptions inner;
    inner.compare = options.compare;
    Checkpoint ck = open_checkpoint(sf->model, inner);
    ck.step_dir = dir;
    ck.trainer = sf->trainer;
    ck.asset_dirs = sf->asset_dirs;
    if (!sf->unfinished.empty())
      ck.incomplete.insert(ck.incomplete.begin(), Finding{"step-unfinished", Where(dir),
                                                          sf->unfinished + " (give " + sf->model +
                                                              " itself to read the model files regardless)"});
    return ck;
  }
  if (auto refusal = run_folder_refusal(dir)) throw UsageError(Where(dir), *refusal);
  throw FormatError(Where(path), "missing: " + dir + " is not a DCP checkpoint directory");
}

}  // namespace

Checkpoint open_checkpoint(const std::string& path, const std::vector<uint8_t>* metadata) {
  OpenOptions o;
  o.metadata = metadata;
  return open_checkpoint(path, o);
}

Checkpoint open_checkpoint(const std::string& path, const OpenOptions& options) {
  PathInfo st = stat_path(path);
  if (st.kind == PathInfo::missing)
    throw IoError(Where(path),
                  "cannot open checkpoint: " + (st.err ? errno_text(st.err) : std::string("no such object or prefix")));
  Probe p;
  p.path = path;
  p.directory = st.kind == PathInfo::directory;
  p.compare = options.compare;
  p.metadata = p.directory ? options.metadata : nullptr;
  const LayoutReader* compare_only = nullptr;  // a row only diff and stats read, which took the path
  for (const LayoutReader& r : layout_readers()) {
    if (!r.detect || (r.compare_only && !p.compare && compare_only) || !r.detect(p)) continue;
    if (r.compare_only && !p.compare) {
      compare_only = &r;
      continue;
    }
    if (!r.open)
      throw UnsupportedError(Where(path), std::string(r.name) + ": reading this layout needs " + r.installed_by);
    return r.open(p);
  }
  // A valid input this command does not read: not damaged (exit 3), not an I/O error (exit 4).
  if (compare_only)
    throw UnsupportedError(Where(path), (p.directory ? std::string("a folder of ") : std::string()) +
                                            compare_only->name + " (" + compare_only->description +
                                            "): this command does not read it; dcpctl stats and dcpctl diff do "
                                            "(and Python's dcpctl.open)");
  if (p.directory) return open_unrecognised_dir(p, options);
  if (ends_with(path, ".metadata"))
    throw UsageError(Where(path), "give the checkpoint directory, not its .metadata file");
  throw IoError(Where(path), "not a directory: a DCP checkpoint is a directory holding .metadata");
}

bool opaque_type(const Checkpoint& ck, const TensorMeta& t) {
  return !t.dtype && layout_reader(ck.layout).opaque_types;
}

}  // namespace dcpctl
