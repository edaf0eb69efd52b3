#include "meta/checkpoint.h"

#include <dirent.h>
#include <sys/stat.h>

#include <cerrno>

#include "util/file.h"

namespace dcpctl {

uint64_t Checkpoint::data_bytes() const {
  uint64_t n = 0;
  for (const auto& f : files) n += f.size.value_or(0);
  return n;
}

std::string Checkpoint::path_of(uint32_t file) const { return join_path(dir, md.files.at(file)); }

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

namespace {

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return names;
  while (dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
  ::closedir(d);
  return names;
}

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

[[noreturn]] void explain_missing_metadata(const std::string& dir) {
  std::vector<std::string> names = list_dir(dir);
  size_t distcp = 0, safet = 0, rank_md = 0;
  for (const auto& n : names) {
    if (ends_with(n, ".distcp")) ++distcp;
    if (ends_with(n, ".safetensors")) ++safet;
    if (n.size() > 2 && n.compare(0, 2, "__") == 0 && ends_with(n, ".metadata")) ++rank_md;
  }
  std::string path = join_path(dir, ".metadata");
  if (rank_md > 0)
    throw UnsupportedError(Where(path), "no .metadata, but " + std::to_string(rank_md) +
                                            " per-rank __R.metadata files (saved with use_collectives=False); "
                                            "reading those is not supported yet");
  if (distcp > 0)
    throw FormatError(Where(path), "missing, although the directory holds " + std::to_string(distcp) +
                                       " .distcp files: the save did not finish (the coordinator writes "
                                       ".metadata last), or this node lacks the shared filesystem copy");
  if (safet > 0)
    throw UnsupportedError(Where(path), "missing: the directory holds .safetensors files (Hugging Face format), "
                                        "not a DCP checkpoint");
  throw FormatError(Where(path), "missing: " + dir + " is not a DCP checkpoint directory");
}

}  // namespace

Checkpoint open_checkpoint(const std::string& dir, const std::vector<uint8_t>* metadata) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) throw IoError(Where(dir), "cannot open checkpoint: " + errno_text(errno));
  if (!S_ISDIR(st.st_mode)) {
    if (ends_with(dir, ".metadata"))
      throw UsageError(Where(dir), "give the checkpoint directory, not its .metadata file");
    throw IoError(Where(dir), "not a directory: a DCP checkpoint is a directory holding .metadata");
  }
  Checkpoint ck;
  ck.dir = dir;
  ck.metadata_path = join_path(dir, ".metadata");
  if (metadata) {
    ck.metadata_bytes = metadata->size();
    ck.md = parse_metadata(ByteSpan(metadata->data(), metadata->size()), ck.metadata_path + " (received from another rank)");
  } else {
    if (!path_exists(ck.metadata_path)) explain_missing_metadata(dir);
    MappedFile mf(ck.metadata_path);
    ck.metadata_bytes = mf.size();
    MetadataParseOptions po;
    po.consumed = [&mf](uint64_t done) { mf.drop_before(done); };
    ck.md = parse_metadata(mf.span(), ck.metadata_path, po);
  }
  for (const auto& rel : ck.md.files) {
    DataFileInfo fi;
    fi.relative_path = rel;
    struct stat fs;
    std::string p = join_path(dir, rel);
    if (rel.find("..") != std::string::npos || (!rel.empty() && rel[0] == '/')) {
      fi.error = "path leaves the checkpoint directory";
    } else if (::stat(p.c_str(), &fs) != 0) {
      fi.error = errno_text(errno);
    } else if (!S_ISREG(fs.st_mode)) {
      fi.error = "not a regular file";
    } else {
      fi.size = static_cast<uint64_t>(fs.st_size);
    }
    ck.files.push_back(std::move(fi));
  }
  return ck;
}

}  // namespace dcpctl
