// A torch.save file (`.pt`, `.pth`, `.bin`: torch.save(state_dict), dcp_to_torch_save, dcpctl
// consolidate -o model.pt) as a checkpoint view, for diff and stats.
//
// The file is a zip (torch.save's default since 1.6; the legacy pickle-only format is refused)
// holding `<archive>/data.pkl` (the object) and one STORED record `<archive>/data/<key>` per
// storage (torch_zip.h). data.pkl is decoded by the restricted VM; its nested dicts (and lists
// holding tensors) are flattened with "." exactly as DCP's traverse_state_dict flattens a
// state_dict: dict keys by str(key), list entries by index, a list holding no tensor (and any
// tuple) is one value, an empty dict vanishes. Each tensor becomes one chunk covering the whole
// tensor whose bytes are its storage record's bytes from the view's offset on (ItemFormat::Raw),
// which is exactly what a C-contiguous view is. Non-tensor leaves become BytesMeta entries
// without storage; their repr is returned beside the view.
//
// Refused with UnsupportedError (exit 5) naming the key: anything torch.load(weights_only=True)
// would refuse (a global outside its allow-list, e.g. io.BytesIO or a user class), and tensor
// views that are not C-contiguous (a transposed or expanded tensor saved as is), which one dense
// run of bytes cannot express.
#pragma once

#include <map>
#include <string>

#include "meta/checkpoint.h"

namespace dcpctl {

struct TorchFileView {
  Checkpoint ck;
  std::map<std::string, std::string> values;  // flat key -> Python repr of a non-tensor leaf
};

// Whether `path` names a torch.save file by its suffix (.pt, .pth, .bin).
bool is_torch_file_name(const std::string& path);

TorchFileView open_torch_file(const std::string& path);

}  // namespace dcpctl
