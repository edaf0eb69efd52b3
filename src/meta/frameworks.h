// Files a training framework leaves beside a DCP checkpoint's `.metadata`, which torch's reader
// ignores and dcpctl reads for what they add.
//
// megatron-core (megatron/core/dist_checkpointing, checked against 0.16.1 and 0.19.2):
//   metadata.json   written by rank 0 after every save (core.py save_config): the JSON of a
//                   CheckpointingConfig, {"sharded_backend": "torch_dist", "sharded_backend_version": 1}
//                   (json.dump, one line). Its presence is what megatron's own
//                   check_is_distributed_checkpoint tests; load refuses a backend it does not know.
//   integrity.json  with `dist_checkpointing.save(..., verify_integrity=True)` (0.17 on; 0.16.1 has
//                   no such option): rank 0, after metadata.json, hashes every regular file of the
//                   directory except itself, in sorted order, and writes (json.dump, indent 2)
//                   {"algorithm": "sha256", "files": {"<name relative to the directory>": "<hex>"}}.
//                   load(..., verify_integrity=True) re-hashes every listed file and fails on a
//                   missing file or a different digest; files it does not list are not checked.
// Lightning (lightning.fabric / lightning.pytorch FSDPStrategy and ModelParallelStrategy with
// sharded state dicts):
//   meta.pt         a torch.save of the non-tensor state (write/lightning_meta.h reads it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace dcpctl {

inline constexpr const char* kMegatronConfigFile = "metadata.json";
inline constexpr const char* kIntegrityManifestFile = "integrity.json";
inline constexpr const char* kLightningMetaFile = "meta.pt";

struct MegatronConfig {
  std::string sharded_backend;                     // "torch_dist", "zarr", ...
  std::optional<int64_t> sharded_backend_version;  // absent when the file has none
  nlohmann::json fields;                           // the whole object, as written
};

// metadata.json in `dir` when it is megatron-core's (a JSON object with a string
// "sharded_backend"); nullopt when there is none or it is something else's.
std::optional<MegatronConfig> read_megatron_config(const std::string& dir);

// What inspect shows of the framework that wrote the checkpoint in `dir`, or null:
//   {"name": "megatron-core", "files": [...], "backend": str, "backend_version": int|null, "config": {...}}
//   {"name": "lightning", "files": ["meta.pt"]}
nlohmann::json describe_framework(const std::string& dir);

}  // namespace dcpctl
