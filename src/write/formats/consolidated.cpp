#include "write/formats/consolidated.h"

#include <algorithm>

#include "dist/exchange.h"
#include "dist/group.h"
#include "item/item_reader.h"
#include "pickle/pickler.h"

namespace dcpctl {

using nlohmann::json;

namespace {

// Globals torch.load(weights_only=True) accepts in plain values (torch/_weights_only_unpickler.py).
bool weights_only_global(std::string_view m, std::string_view n) {
  if (m == "collections" && n == "OrderedDict") return true;
  if (m == "torch" && (n == "Size" || dtype_from_torch_name(n))) return true;
  if ((m == "builtins" || m == "__builtin__") && (n == "set" || n == "frozenset" || n == "bytearray" || n == "complex"))
    return true;
  if (m == "_codecs" && n == "encode") return true;
  return false;
}

bool tree_weights_only(const pickle::Tree& tree, std::string& bad) {
  for (const auto* g : tree.globals())
    if (!weights_only_global(g->module, g->name)) {
      bad = std::string(g->module) + "." + std::string(g->name);
      return false;
    }
  return true;
}

Values read_values(const WritePlan& plan, const Metadata& md, ItemReader& reader, bool keep_unsafe) {
  Values v;
  for (const SelectedItem* it : plan.values) {
    std::unique_ptr<pickle::Tree> tree = reader.read_bytes(md.bytes[it->index]);
    std::string bad;
    if (!keep_unsafe && !tree_weights_only(*tree, bad)) {
      v.skipped.push_back(it->key + " (holds " + bad + ", which torch.load(weights_only=True) refuses)");
      continue;
    }
    Pickler trial(2);
    if (!trial.value(tree->root)) {
      v.skipped.push_back(it->key + " (holds tensors or nesting dcpctl cannot re-pickle)");
      continue;
    }
    v.trees.push_back(std::move(tree));
    v.kept.push_back(it);
  }
  return v;
}

}  // namespace

unsigned ConsolidatedWriter::lanes(const WriteRequest& request, Group* group) const {
  return o_.format->writing == Writing::AtOffsets && (!group || group->tagged()) ? std::max(1u, request.o.threads) : 1;
}

void ConsolidatedWriter::check(const WriteRequest& request) {
  (void)request;
  // Each rank would complete the s3:// objects of its own shards, before rank 0 knows every
  // rank succeeded; rank 0 writing them all (the exchange) keeps the commit in one place.
  if (o_.parallel_write && is_remote(o_.output))
    throw UnsupportedError(Where(o_.output),
                           "--parallel-write writes into a shared folder; an s3:// output is written by "
                           "rank 0 from the chunks every rank reads (leave out --parallel-write)");
}

void ConsolidatedWriter::planned(WriteJob& job, json& summary) {
  const WritePlan& plan = job.plan;
  const bool values = o_.format->writes_values;
  // Non-tensor values: a format that writes them (written by rank 0 alone) re-pickles them, and
  // rank 0 needs every one (--local-files: sent by a rank that sees it).
  if (values && job.group && o_.local_files && !o_.dry_run) {
    std::vector<BytesMeta> raw;
    for (const SelectedItem* it : plan.values) raw.push_back(job.request.ck.md.bytes[it->index]);
    gather_raw_items(*job.group, job.visibility, job.reader, raw, 0);
  }
  if (values && job.leader) {
    values_ = read_values(plan, job.request.ck.md, job.reader, o_.keep_unsafe_values);
  } else {
    for (const SelectedItem* it : plan.values) values_.skipped.push_back(it->key);
  }
  // A Lightning checkpoint's meta.pt: merged into a .pt as Lightning's consolidation merges it.
  // Rank 0 alone reads it; under torchrun a refusal reaches the others at the plan agreement.
  if (job.leader) {
    try {
      lightning_ = merge_lightning_meta(job.request.ck, plan, values_.kept, o_);
    } catch (const std::exception& e) {
      if (job.group) job.group->announce("agree/plan", std::string("rank 0 failed: ") + e.what(), exit_code_of(e));
      throw;
    }
    if (!lightning_.summary.is_null()) summary["lightning_meta"] = lightning_.summary;
    assets_summary(plan, summary);
  }
  summary["format"] = std::string(o_.format->name);
  summary["non_tensor_included"] = values_.kept.size();
  summary["non_tensor_skipped"] = values_.skipped;
  plan_files(job, summary);
}

// The assets copied (or, with --dry-run, to be copied), those left out, and what config.json
// says of tied word embeddings against the keys written; notes for what a user must act on.
void ConsolidatedWriter::assets_summary(const WritePlan& plan, json& summary) const {
  json copied = json::array(), skipped = json::array();
  for (const Asset& a : assets_.files) copied.push_back(join_path(o_.output, a.name));
  for (const AssetSkip& s : assets_.skipped) {
    skipped.push_back({{"path", s.path}, {"reason", s.reason}});
    if (o_.note) o_.note("not copied beside the weights: " + s.path + ": " + s.reason);
  }
  summary["assets"] = copied;
  summary["assets_skipped"] = skipped;
  std::vector<std::string> keys;
  for (const PlannedTensor& t : plan.tensors) keys.push_back(t.key);
  std::optional<TiedEmbeddings> tied = tied_embeddings(assets_, keys);
  // An HF folder's keys are written under the names they were read by: a release layout stays one
  // (null for the other outputs).
  summary["hf_layout"] = keeps_layout_ ? output_layout(assets_, keys) : json(nullptr);
  summary["tie_word_embeddings"] = nullptr;
  if (tied) {
    summary["tie_word_embeddings"] = {{"config", tied->config}, {"lm_head_weight", tied->lm_head}};
    if (!tied->note.empty()) {
      summary["tie_word_embeddings"]["note"] = tied->note;
      if (o_.note) o_.note(tied->note);
    }
  }
  bool config =
      std::any_of(assets_.files.begin(), assets_.files.end(), [](const Asset& a) { return a.name == "config.json"; });
  if (o_.note && wants_config_ && !config) {
    std::string where;
    for (const auto& d : assets_.searched) where += (where.empty() ? "" : " or ") + d;
    o_.note("no config.json in " + where +
            ", and from_pretrained needs one: give --assets DIR (the Hugging Face "
            "folder the run started from), or --no-assets to say none is wanted");
  }
}

void ConsolidatedWriter::write(WriteJob& job, Executor& ex, const std::string& set_up) {
  if (o_.note && !values_.skipped.empty())
    o_.note(std::to_string(values_.skipped.size()) + " non-tensor item(s) left out" +
            (o_.format->tensors_only ? " (safetensors holds tensors only)" : "") + ": " + values_.skipped.front() +
            (values_.skipped.size() > 1 ? ", ..." : ""));
  if (o_.note && !lightning_.note.empty()) o_.note(lightning_.note);
  write_files(job, ex, set_up);
}

void ConsolidatedWriter::finish(WriteJob& job, json& summary) {
  if (!job.group) return;
  summary["ranks"] = job.group->size();
  summary["backend"] = job.group->backend_name();
}

}  // namespace dcpctl
