// Checking a Hugging Face folder (`model.safetensors`, or `model-0000i-of-0000N.safetensors` with
// `model.safetensors.index.json`, beside `config.json`, `generation_config.json` and the tokenizer)
// or a single `.safetensors` file as a loader will take it: every problem at once, each with a
// stable code (docs/integrity.md has the table; all are exit 3). What `verify` runs on an HF
// folder, and what an HF export can run on its own output before renaming it into place.
//
// Three sets of checks, on top of the structural ones that opening the folder makes
// (meta/structure.h: missing files, keys an index names that its file lacks, ...):
//   - each `.safetensors` file's header (check/safetensors_audit.h): header-invalid,
//     duplicate-key, size-mismatch, window-out-of-file, window-overlap, offsets-gap;
//   - a release layout's key beside the save_pretrained key it loads as: key-loads-twice (a folder
//     in a release layout, check/hf_schema.h's load_renames, is checked under the names it loads as);
//   - the index: key-in-several-files (a key two files hold), index-total-size
//     (`metadata.total_size` is neither the tensors' bytes, as transformers and huggingface_hub
//     write it, nor the files' sizes);
//   - `config.json` against the tensors (check/hf_config_checks.h), read through transformers'
//     `attribute_map` spellings and a nested `text_config`: layer-missing, layer-unexpected,
//     mtp-layer-missing, expert-missing, expert-count-mismatch, vocab-size-mismatch,
//     embedding-missing, lm-head-missing, tied-head-differs, quant-scale-missing,
//     quant-scale-orphan, quant-excluded-quantized, dtype-mismatch, config-invalid;
//   - the keys against the model schema of the config's model_type (check/hf_schema.h):
//     schema-key-unexpected, schema-key-missing, schema-shape-mismatch (a note,
//     schema-not-checked, where the schema does not hold the model);
//   - sidecars: which of config.json, generation_config.json and the tokenizer files are there
//     (the report's `sidecars`); one the caller names in `expect_files` and absent is
//     sidecar-missing. Nothing else is asked of them: a bare torch export has no config at all.
// Warnings: mtp-layers-absent (the config counts MTP layers and the folder holds none, as
// transformers' save_pretrained writes DeepSeek-V3; a problem with `require_mtp`),
// tie-not-compared (a tied head sharded differently from the embedding), dtype-kept-by-user (a
// tensor off the config's dtype that a --keep-dtype glob its file's header records matches:
// meta/keep_dtype_entry.h; the user's choice, where otherwise dtype-mismatch), keep-dtype-entry-invalid
// (that entry garbled or over its caps: ignored).
// Deliberately not checked (no false alarms on real releases): a missing config.json, tokenizer
// or generation config when nothing asked for them; per-layer tensor sets (models mix layer kinds).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "meta/checkpoint.h"
#include "util/finding.h"

namespace dcpctl {

struct HfCheckOptions {
  // Base names that must be in the folder (consolidate's --assets copies, verify --expect-assets).
  std::vector<std::string> expect_files;
  // The config's MTP layers must all be there (all absent is then a problem, not a warning).
  bool require_mtp = false;
  // An export's own check: the keys its --dtype precision policy kept in their saved dtype (the
  // dtype check accepts them; check_hf_config's kept_dtype).
  std::set<std::string> kept_dtype;
};

struct HfReport {
  Findings problems;  // any makes the folder unusable as it stands: exit 3
  Findings warnings;
  Findings notes;  // schema-not-checked: a model type the model schema does not hold
  // verify --json's "hf": {"config", "index", "files_audited", "sidecars", "config_checks",
  // "schema"} (schema: check_hf_schema's summary, null without a config.json)
  nlohmann::json summary;
  // check_hf_schema's only_with: a schema-key-unexpected problem's key -> the config setting under
  // which the model has it.
  std::map<std::string, std::string> only_with;
};

// Whether `ck` is a folder or file these checks are for (HF safetensors, HF-mode DCP shards).
bool is_hf_checkpoint(const Checkpoint& ck);

// Every check above on the HF folder or `.safetensors` file at `path`, with the structural
// findings of opening it (meta/structure.h) merged in: where both name one problem, the more
// precise finding stays (a header's duplicate-key, not the reader's bad-safetensors-header), so
// `problems` replaces check_structure's. With `opened`, the checkpoint already opened from `path`
// is used; without, it is opened here and a folder that cannot be opened is a metadata-invalid
// finding (its headers are still audited).
// Throws IoError only when `path` itself cannot be read.
HfReport check_hf_folder(const std::string& path, const HfCheckOptions& opts = {}, const Checkpoint* opened = nullptr);

}  // namespace dcpctl
