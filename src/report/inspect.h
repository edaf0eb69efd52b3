// The inspect report: everything `.metadata` says about a checkpoint, as JSON data (the CLI
// renders it for people or prints it as is with --json).
//
// JSON schema, version 1 (additions keep the version; removals or changes bump it):
// {
//   "schema_version": 1,
//   "checkpoint": "<dir>",
//   "layout": "dcp" | "dcp-safetensors-items" | "dcp-rank-local" | "hf-dcp" | "hf-safetensors",
//   "metadata": {"path", "bytes", "pickle_protocol", "class", "version" (str|null),
//                "writer_releases", "checkpoint_id", "save_id", "load_id", "modules",
//                "has_planner_data", "unknown_globals": [..], "extra_attributes": [..],
//                "sources": [every metadata file or header the view was built from]},
//   "framework": null | {"name": "megatron-core", "files": ["metadata.json", "integrity.json"?],
//                 "backend", "backend_version" (int|null), "config": {metadata.json as written}}
//                | {"name": "lightning", "files": ["meta.pt"]}          (meta/frameworks.h),
//   "summary":  {"files", "files_missing", "data_bytes", "ranks": [..], "tensors", "bytes_items",
//                "chunks", "tensor_bytes", "complete": bool,
//                "dtypes": {"float32": {"tensors": n, "bytes": n}, ...}},
//   "files":    [{"path", "rank" (int|null), "bytes" (int|null), "items", "error"?}],
//   "items":    [{"key", "kind": "tensor", "path": [..]?, "dtype", "shape", "numel", "bytes",
//                 "requires_grad", "chunks", "sharding", "complete",
//                 "chunk_list"?: [{"offsets", "sizes", "file", "offset", "length", "transforms"?}]},
//                {"key", "kind": "bytes", "path"?, "file", "offset", "length", "value"?, "repr"?}],
//   "problems": [{"code", "key", "message"}]      structural problems seen without reading data
// }
// On failure, `dcpctl inspect --json` prints instead (and exits with the code):
// {"schema_version": 1, "checkpoint": "<path>", "error": {"exit_code", "kind": "usage"|"invalid"|
//  "io"|"unsupported"|"failure", "file", "offset" (int|null), "key", "message"}}
// "path" is the nested location from planner_data (strings are dict keys, ints list indices).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "meta/checkpoint.h"

namespace dcpctl {

struct InspectOptions {
  std::vector<std::string> filters;  // fnmatch globs on flat keys; empty = everything
  bool chunks = false;               // include chunk_list per tensor
};

nlohmann::json inspect_report(const Checkpoint& ck, const InspectOptions& opts);

// True when `key` matches any of the globs (fnmatch, case-sensitive, '*' crosses dots).
bool matches_any(const std::string& key, const std::vector<std::string>& globs);

}  // namespace dcpctl
