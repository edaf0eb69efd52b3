#include "write/compat.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <vector>

#include "meta/structure.h"
#include "store/file.h"
#include "util/error.h"
#include "write/dcp_metadata.h"
#include "write/leftovers.h"
#include "write/output.h"

namespace dcpctl {
namespace {

namespace fs = std::filesystem;

// An fd that closes itself.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

// The compat copy's .metadata: the input's model, written back with 5-tuple properties.
MetadataOut metadata_out(const Checkpoint& ck) {
  const Metadata& md = ck.md;
  MetadataOut mo;
  mo.order = md.order;
  mo.files = md.files;
  mo.planner_data = md.planner_data;
  if (md.storage_meta) {
    mo.checkpoint_id = md.storage_meta->checkpoint_id;
    mo.modules = md.storage_meta->modules;
  }
  // The data files are the same save: its id stays (a fresh one where the writer kept none).
  mo.save_id = md.storage_meta && md.storage_meta->save_id ? *md.storage_meta->save_id : uuid4();
  auto transforms = [&](const StorageRef& r) { return md.transform_sets[r.transforms]; };
  auto need = [&](const StorageRef& r, const std::string& fqn, size_t chunk) {
    if (!r.present())
      throw FormatError(Where(ck.metadata_path, std::nullopt, fqn),
                        "chunk " + std::to_string(chunk) + " has no storage entry: the checkpoint is incomplete");
  };
  mo.tensors.reserve(md.tensors.size());
  for (const TensorMeta& t : md.tensors) {
    MetaTensorOut o;
    o.fqn = t.fqn;
    o.dtype_name = t.dtype_name;
    o.requires_grad = t.requires_grad;
    o.shape = t.shape;
    o.chunks.reserve(t.num_chunks());
    size_t nd = t.ndim();
    for (size_t i = 0; i < t.num_chunks(); ++i) {
      const StorageRef& r = t.storage[i];
      need(r, t.fqn, i);
      MetaChunkOut c;
      c.offsets.assign(t.chunk_offsets(i), t.chunk_offsets(i) + nd);
      c.sizes.assign(t.chunk_sizes(i), t.chunk_sizes(i) + nd);
      c.file = r.file;
      c.offset = r.offset;
      c.length = r.length;
      c.transforms = transforms(r);
      o.chunks.push_back(std::move(c));
    }
    mo.tensors.push_back(std::move(o));
  }
  mo.bytes.reserve(md.bytes.size());
  for (const BytesMeta& b : md.bytes) {
    need(b.storage, b.fqn, 0);
    mo.bytes.push_back({b.fqn, b.storage.file, b.storage.offset, b.storage.length, transforms(b.storage)});
  }
  return mo;
}

// The first difference between what two models say of the items (empty: none). The written file
// is read back with the same parser that read the input, so a writer bug cannot pass as a copy.
std::string first_difference(const Metadata& a, const Metadata& b) {
  if (a.tensors.size() != b.tensors.size() || a.bytes.size() != b.bytes.size()) return "item counts differ";
  if (a.order != b.order) return "item order differs";
  auto same_ref = [&](const StorageRef& x, const StorageRef& y) {
    return x.present() == y.present() && (!x.present() || a.files[x.file] == b.files[y.file]) && x.offset == y.offset &&
           x.length == y.length && a.transform_sets[x.transforms] == b.transform_sets[y.transforms];
  };
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const TensorMeta &x = a.tensors[i], &y = b.tensors[i];
    if (x.fqn != y.fqn || x.dtype_name != y.dtype_name || x.requires_grad != y.requires_grad || x.shape != y.shape ||
        x.chunk_dims != y.chunk_dims || x.storage.size() != y.storage.size())
      return "tensor '" + x.fqn + "' differs";
    for (size_t c = 0; c < x.storage.size(); ++c)
      if (!same_ref(x.storage[c], y.storage[c]))
        return "tensor '" + x.fqn + "' chunk " + std::to_string(c) + " storage differs";
    if (y.strides_recorded) return "tensor '" + x.fqn + "' still records strides";
  }
  for (size_t i = 0; i < a.bytes.size(); ++i)
    if (a.bytes[i].fqn != b.bytes[i].fqn || !same_ref(a.bytes[i].storage, b.bytes[i].storage))
      return "item '" + a.bytes[i].fqn + "' differs";
  if (a.planner_data.size() != b.planner_data.size()) return "planner_data differs";
  return {};
}

bool try_reflink(const std::string& src, const std::string& dst, int& err) {
  Fd in(::open(src.c_str(), O_RDONLY | O_CLOEXEC));
  if (in.fd < 0) throw IoError(Where(src), "cannot open: " + errno_text(errno));
  Fd out(::open(dst.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (out.fd < 0) throw IoError(Where(dst), "cannot create: " + errno_text(errno));
  if (::ioctl(out.fd, FICLONE, in.fd) == 0) return true;
  err = errno;
  ::unlink(dst.c_str());
  return false;
}

bool try_hard_link(const std::string& src, const std::string& dst, int& err) {
  if (::linkat(AT_FDCWD, src.c_str(), AT_FDCWD, dst.c_str(), AT_SYMLINK_FOLLOW) == 0) return true;
  err = errno;
  return false;
}

void copy_file(const std::string& src, const std::string& dst, uint64_t size) {
  Fd in(::open(src.c_str(), O_RDONLY | O_CLOEXEC));
  if (in.fd < 0) throw IoError(Where(src), "cannot open: " + errno_text(errno));
  Fd out(::open(dst.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (out.fd < 0) throw IoError(Where(dst), "cannot create: " + errno_text(errno));
  uint64_t done = 0;
  bool cfr = true;
  std::vector<char> buf;
  while (done < size) {
    ssize_t n = -1;
    if (cfr) {
      n = ::copy_file_range(in.fd, nullptr, out.fd, nullptr, size - done, 0);
      if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EOPNOTSUPP || errno == EINVAL)) {
        cfr = false;
        continue;
      }
    } else {
      if (buf.empty()) buf.resize(8u << 20);
      n = ::read(in.fd, buf.data(), std::min<uint64_t>(buf.size(), size - done));
      if (n > 0) {
        ssize_t w = 0;
        while (w < n) {
          ssize_t k = ::write(out.fd, buf.data() + w, static_cast<size_t>(n - w));
          if (k < 0) {
            if (errno == EINTR) continue;
            throw IoError(Where(dst, done + static_cast<uint64_t>(w)), "write failed: " + errno_text(errno));
          }
          w += k;
        }
      }
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      throw IoError(Where(src, done), "copy failed: " + errno_text(errno));
    }
    if (n == 0)
      throw IoError(Where(src, done), "file shrank while being copied (" + std::to_string(size) + " bytes expected)");
    done += static_cast<uint64_t>(n);
  }
  if (::fsync(out.fd) != 0) throw IoError(Where(dst), "fsync failed: " + errno_text(errno));
}

}  // namespace

const char* link_mode_name(LinkMode m) {
  switch (m) {
    case LinkMode::Auto: return "auto";
    case LinkMode::Reflink: return "reflink";
    case LinkMode::Hard: return "hard";
    case LinkMode::Copy: return "copy";
  }
  return "?";
}

CompatResult write_compat(const Checkpoint& ck, const CompatOptions& opts) {
  auto t0 = std::chrono::steady_clock::now();
  if (is_remote_path(ck.dir) || is_remote_path(opts.output))
    throw UnsupportedError(Where(is_remote_path(ck.dir) ? ck.dir : opts.output),
                           "compat links files on one filesystem; object storage is not supported (download the "
                           "checkpoint, or reshard it into the store, which writes 5-tuple properties too)");
  if ((ck.layout != CheckpointLayout::Dcp && ck.layout != CheckpointLayout::DcpSafetensorsItems) ||
      fs::path(ck.metadata_path).filename() != ".metadata")
    throw UnsupportedError(Where(ck.dir), std::string("compat rewrites a DCP .metadata; this checkpoint is ") +
                                              layout_description(ck.layout));
  // What `verify` without --deep judges (files present, windows inside them, chunks tiling every
  // tensor): a copy of a broken checkpoint would pass for a good one in the older torch.
  StructureReport sr = check_structure(ck);
  if (!sr.problems.empty()) {
    std::string text;
    for (size_t i = 0; i < sr.problems.size() && i < 20; ++i) text += "\n  " + sr.problems[i].text();
    if (sr.problems.size() > 20)
      text += "\n  ... (" + std::to_string(sr.problems.size() - 20) + " more; dcpctl verify lists them)";
    throw FormatError(Where(ck.dir), "the checkpoint is incomplete or invalid; refusing to copy it:" + text);
  }
  check_output_path(opts.output, opts.force, ck.dir);
  clear_dead_temporaries(opts.output, false, opts.note);  // what a killed run left: write/leftovers.h

  CompatResult res;
  res.strided_tensors = ck.md.strided_tensors();
  res.before = ck.md.oldest_loader();
  MetadataOut mo = metadata_out(ck);
  std::string pkl = metadata_pickle(mo);
  Metadata back = parse_metadata(ByteSpan(reinterpret_cast<const uint8_t*>(pkl.data()), pkl.size()), "(new .metadata)");
  if (std::string d = first_difference(ck.md, back); !d.empty())
    throw Error(Where(ck.metadata_path),
                "internal error: the rewritten .metadata does not describe the same checkpoint: " + d);
  res.after = back.oldest_loader();
  res.metadata_bytes = pkl.size();

  install_cleanup_handlers();
  OutputDir out(opts.output);
  fs::path root(ck.dir);
  std::error_code ec;
  fs::recursive_directory_iterator it(root, fs::directory_options::none, ec), end;
  if (ec) throw IoError(Where(ck.dir), "cannot list: " + ec.message());
  bool reflink_ok = opts.link == LinkMode::Auto || opts.link == LinkMode::Reflink;
  bool hard_ok = opts.link == LinkMode::Auto || opts.link == LinkMode::Hard;
  for (; it != end; it.increment(ec)) {
    if (ec) throw IoError(Where(ck.dir), "cannot list: " + ec.message());
    const fs::path rel = fs::relative(it->path(), root);
    std::string src = it->path().string(), dst = out.path_of(rel.string());
    struct stat st;
    if (::stat(src.c_str(), &st) != 0) throw IoError(Where(src), "cannot stat: " + errno_text(errno));
    if (S_ISDIR(st.st_mode)) {
      if (::mkdir(dst.c_str(), 0755) != 0) throw IoError(Where(dst), "cannot create: " + errno_text(errno));
      continue;
    }
    if (!S_ISREG(st.st_mode)) continue;  // sockets, fifos: nothing a checkpoint holds
    if (rel == ".metadata") continue;
    uint64_t size = static_cast<uint64_t>(st.st_size);
    int err = 0;
    if (reflink_ok && try_reflink(src, dst, err)) {
      ++res.files_reflinked;
      res.bytes_reflinked += size;
      continue;
    }
    if (opts.link == LinkMode::Reflink)
      throw UnsupportedError(
          Where(src), "the filesystem cannot reflink it (" + errno_text(err) + "); use --link hard or --link copy");
    // Reflinking into a filesystem that cannot is cheap to find out once: every later file
    // would fail the same way, so Auto stops trying.
    reflink_ok = false;
    if (hard_ok && try_hard_link(src, dst, err)) {
      ++res.files_hard_linked;
      res.bytes_hard_linked += size;
      continue;
    }
    if (opts.link == LinkMode::Hard)
      throw UnsupportedError(Where(src), "cannot hard-link it into " + opts.output + " (" + errno_text(err) +
                                             "; another filesystem?); use --link copy");
    hard_ok = false;
    copy_file(src, dst, size);
    ++res.files_copied;
    res.bytes_copied += size;
  }
  {
    OutputFile mf(out.path_of(".metadata"));
    mf.pwrite_all(pkl.data(), pkl.size(), 0);
    mf.commit();
  }
  out.commit();
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace dcpctl
