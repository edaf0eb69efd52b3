// A copy of a DCP checkpoint that older torch can load, without copying its data.
//
// torch 2.15 pickles each TensorProperties as a 6-tuple (the strides appended) and keeps the format
// version "1.0.0"; torch 2.14 and older unpack exactly five values and refuse the whole file
// ("too many values to unpack (expected 5)"). Nothing else in the format changed: the data files
// are the same bytes for every release. So the compatible copy is a new `.metadata` with 5-tuple
// properties (write/dcp_metadata.h: every item, chunk, storage entry, transform, planner_data and
// the save id kept) beside the data files taken over as they are: reflinked where the filesystem
// shares extents (btrfs, XFS: a copy-on-write clone, independent of the original), else hard-linked
// (same filesystem: the same inode, so the copy must be treated as read-only, as checkpoints are),
// else copied (copy_file_range). Every other file of the folder (assets, framework metadata) is
// taken over the same way; subfolders are kept.
//
// The output is a directory written under a temporary name and renamed when complete
// (write/output.h); the input is never modified. The new `.metadata` is parsed back before the
// rename and must describe the same items as the original.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "meta/checkpoint.h"

namespace dcpctl {

enum class LinkMode { Auto, Reflink, Hard, Copy };

struct CompatOptions {
  std::string output;
  bool force = false;
  LinkMode link = LinkMode::Auto;                // Auto: reflink, else hard link, else copy, per file
  std::function<void(const std::string&)> note;  // one-line notices (stderr): a dead run's temporary removed
};

struct CompatResult {
  size_t strided_tensors = 0;  // in the input's .metadata; the output has none
  Metadata::LoaderBound before, after;
  uint64_t files_reflinked = 0, files_hard_linked = 0, files_copied = 0;
  uint64_t bytes_reflinked = 0, bytes_hard_linked = 0, bytes_copied = 0;
  uint64_t metadata_bytes = 0;  // the new .metadata
  double seconds = 0;
};

// Throws UnsupportedError (not a DCP `.metadata` checkpoint, an s3:// path, a link mode the
// filesystem refuses), FormatError (the checkpoint is incomplete), UsageError (the output exists
// without force, or lies inside the checkpoint), IoError.
CompatResult write_compat(const Checkpoint& ck, const CompatOptions& opts);

const char* link_mode_name(LinkMode m);

}  // namespace dcpctl
