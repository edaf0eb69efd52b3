#include "meta/run_folder.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <regex>

#include "meta/layouts.h"
#include "meta/readers.h"
#include "meta/structure.h"
#include "store/file.h"

namespace dcpctl {

using meta_detail::ends_with;

const RunEntry* RunFolder::newest_complete() const {
  for (auto it = entries.rbegin(); it != entries.rend(); ++it)
    if (it->complete) return &*it;
  return nullptr;
}

bool holds_checkpoint_files(const std::string& dir) {
  // torch_checkpointing's step folders (metadata.pkl, <item>_<rank>.pt): its reader's own test.
  Probe probe;
  probe.path = dir;
  probe.directory = true;
  if (layout_reader(CheckpointLayout::TorchCheckpointing).detect(probe)) return true;
  for (const auto& n : probe.names()) {
    if (n == ".metadata" || n == "model.safetensors.index.json" || ends_with(n, ".distcp") ||
        ends_with(n, ".safetensors") || (n.size() > 11 && n.compare(0, 2, "__") == 0 && ends_with(n, ".metadata")) ||
        rank_torch_file(n))
      return true;
    if (n == "sharded" && is_directory(join_path(dir, n)))
      for (const auto& m : list_dir(join_path(dir, n)))
        if (ends_with(m, ".safetensors")) return true;
  }
  return false;
}

namespace {

// A small text file (a tracker, a pointer), trimmed; nullopt when absent, unreadable or larger
// than a pointer can be.
std::optional<std::string> small_text(const std::string& path) {
  PathInfo st = stat_path(path);
  if (st.kind != PathInfo::file || st.size > 4096) return std::nullopt;
  try {
    const std::string text = ReadFile(path).read_all();
    size_t b = text.find_first_not_of(" \t\r\n"), e = text.find_last_not_of(" \t\r\n");
    return b == std::string::npos ? std::string() : text.substr(b, e - b + 1);
  } catch (const Error&) {
    return std::nullopt;
  }
}

}  // namespace

std::optional<StepFolder> step_folder(const std::string& dir) {
  if (!is_directory(dir) || holds_checkpoint_files(dir)) return std::nullopt;
  auto has = [&dir](const char* name) { return path_exists(join_path(dir, name)); };
  StepFolder sf;
  sf.dir = dir;
  // transformers' Trainer, FSDP through accelerate with SHARDED_STATE_DICT: the first (only)
  // model's DCP in pytorch_model_fsdp_0/, its optimizer's in optimizer_0/, and trainer_state.json
  // written after both (with the config and tokenizer in the step folder).
  std::string fsdp = join_path(dir, "pytorch_model_fsdp_0");
  if (is_directory(fsdp) && holds_checkpoint_files(fsdp)) {
    sf.model = fsdp;
    sf.trainer = "transformers";
    if (!has("trainer_state.json"))
      sf.unfinished =
          "no trainer_state.json beside pytorch_model_fsdp_0/: the Trainer writes it after the model and "
          "optimizer, so this save did not finish";
    sf.asset_dirs = {dir, parent_path(dir)};
    return sf;
  }
  // verl (global_step_N/): each role's per-rank torch.save files in actor/ (critic/ beside it),
  // its config and tokenizer in actor/huggingface/. The run's tracker says which steps finished
  // (scan_run_folder).
  std::string actor = join_path(dir, "actor");
  if (is_directory(actor) && holds_checkpoint_files(actor)) {
    sf.model = actor;
    sf.trainer = "verl";
    sf.asset_dirs = {join_path(actor, "huggingface"), dir, parent_path(dir)};
    return sf;
  }
  std::string model = join_path(dir, "model");
  if (!is_directory(model) || !holds_checkpoint_files(model)) return std::nullopt;
  sf.model = model;
  static const std::regex kAutoModelName(R"(epoch_\d+_step_\d+)");
  if (has("CHECKPOINT_COMPLETE") || has("metadata.json") || is_directory(join_path(dir, "rng_state")) ||
      is_directory(join_path(dir, "dataloader"))) {
    // LLaMA-Factory v1 (checkpoint-N/: model/, optimizer/, metadata.json, rng_state/,
    // dataloader/), whose rank 0 writes CHECKPOINT_COMPLETE once every rank has saved.
    sf.trainer = "llamafactory";
    if (!has("CHECKPOINT_COMPLETE"))
      sf.unfinished =
          "no CHECKPOINT_COMPLETE marker: LLaMA-Factory writes it once every rank has saved, so this save "
          "is in flight or died";
    sf.asset_dirs = {join_path(dir, "hf_model"), dir, parent_path(dir)};
  } else if (has(".incomplete") || is_directory(join_path(dir, "optim")) ||
             std::regex_match(base_name(dir), kAutoModelName)) {
    // NeMo AutoModel (epoch_E_step_S/: model/, optim/, ...): .incomplete from the start of a save
    // until it is published.
    sf.trainer = "nemo-automodel";
    if (has(".incomplete"))
      sf.unfinished =
          ".incomplete is there: NeMo AutoModel removes it once the save is published, so this save is in "
          "flight or died";
    sf.asset_dirs = {join_path(model, "consolidated"), join_path(model, ".hf_metadata"), dir, parent_path(dir)};
  } else {
    sf.asset_dirs = {dir};
  }
  return sf;
}

namespace {

// Sizes and newest mtime of the regular files below `dir`, never following links.
void walk(const std::string& dir, int depth, uint64_t& bytes, int64_t& mtime) {
  if (depth > 4) return;
  for (const auto& n : list_dir(dir)) {
    std::string p = join_path(dir, n);
    PathInfo st = stat_path(p, false);
    if (st.kind == PathInfo::file) {
      bytes += st.size;
      mtime = std::max<int64_t>(mtime, st.mtime);
    } else if (st.kind == PathInfo::directory) {
      walk(p, depth + 1, bytes, mtime);
    }
  }
}

bool optimizer_key(const std::string& key) {
  size_t start = 0;
  while (start <= key.size()) {
    size_t dot = key.find('.', start);
    std::string part = key.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (part.rfind("optim", 0) == 0 || part == "exp_avg" || part == "exp_avg_sq" || part == "momentum_buffer")
      return true;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return false;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

void judge_entry(RunEntry& e) {
  e.judged = true;
  auto t0 = std::chrono::steady_clock::now();
  try {
    Checkpoint ck = open_checkpoint(e.model_path.empty() ? e.path : e.model_path);
    e.open_seconds = seconds_since(t0);
    e.metadata_bytes = ck.metadata_bytes;
    e.layout = ck.layout;
    auto t1 = std::chrono::steady_clock::now();
    StructureReport r = check_structure(ck);
    e.check_seconds = seconds_since(t1);
    if (!e.step_unfinished.empty())  // the trainer's marker first: it is the reason users act on
      r.problems.insert(r.problems.begin(), Finding{"step-unfinished", Where(e.path), e.step_unfinished});
    e.problems = r.problems.size();
    e.complete = r.problems.empty();
    if (!e.complete) e.why_incomplete = r.problems.front().text();
    e.tensors = ck.md.tensors.size();
    for (const auto& t : ck.md.tensors) {
      ++e.dtypes[t.dtype_name];
      e.optimizer = e.optimizer || optimizer_key(t.fqn);
    }
    for (const auto& b : ck.md.bytes) e.optimizer = e.optimizer || optimizer_key(b.fqn);
  } catch (const Error& err) {
    if (e.open_seconds == 0) e.open_seconds = seconds_since(t0);
    e.complete = false;
    e.problems = 1;
    e.why_incomplete = err.what();
  }
}

// The numbers in a checkpoint's name, in order (what entries sort by), and its step: the only
// number, or the one after `step` where there are several.
void number_entry(RunEntry& e) {
  static const std::regex kStep(R"((?:^|[^a-z])step[_=-]?(\d{1,18})(?:\D|$))", std::regex::icase);
  const std::string& n = e.name;
  for (size_t i = 0; i < n.size();) {
    if (!isdigit(static_cast<unsigned char>(n[i]))) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < n.size() && isdigit(static_cast<unsigned char>(n[j]))) ++j;
    e.order.push_back(std::stoull(n.substr(i, std::min<size_t>(j - i, 18))));
    i = j;
  }
  if (e.order.size() == 1) e.step = static_cast<int64_t>(e.order[0]);
  if (std::smatch sm; e.order.size() > 1 && std::regex_search(n, sm, kStep))  // epoch_E_step_S, epoch=E-step=S
    e.step = static_cast<int64_t>(std::stoull(sm[1].str()));
}

// Entry n of run folder `dir`, where it is a checkpoint's folder named as one of a run.
std::optional<RunEntry> run_entry(const std::string& dir, const std::string& n) {
  // NAME<digits>[.ckpt][marker]: the step number last (Lightning's epoch=E-step=S.ckpt/ keeps its
  // suffix), then any marker of a save in flight.
  static const std::regex kName(R"(^(.*?)(\d+)((?:\.ckpt)?)((?:[._-](?:tmp|temp|partial|incomplete|inprogress))*)$)",
                                std::regex::icase);
  std::smatch m;
  // .NAME.dcpctl-tmp-*: an output a dcpctl run is writing, or one a killed run left
  // (write/leftovers.h; prune removes those). Never a checkpoint, though its name may end in digits.
  if (n[0] == '.' && n.find(".dcpctl-tmp-") != std::string::npos) return std::nullopt;
  if (!std::regex_match(n, m, kName) || m[2].length() > 18) return std::nullopt;
  std::string p = join_path(dir, n);
  PathInfo lst = stat_path(p, false);
  if (lst.kind == PathInfo::missing) return std::nullopt;
  if (!is_directory(p)) return std::nullopt;
  std::optional<StepFolder> sf;
  if (!holds_checkpoint_files(p) && !(sf = step_folder(p))) return std::nullopt;
  RunEntry e;
  e.name = n;
  e.path = p;
  e.model_path = sf ? sf->model : p;
  if (sf) {
    e.trainer = sf->trainer;
    e.step_unfinished = sf->unfinished;
  } else if (path_exists(join_path(p, "meta.pt"))) {
    e.trainer = "lightning";
  } else if (n.rfind("iter_", 0) == 0 && path_exists(join_path(p, "metadata.json"))) {
    e.trainer = "megatron";  // dist_checkpointing's metadata.json in Megatron's iter_NNNNNNN/
  }
  number_entry(e);
  // transformers stages a save as tmp-checkpoint-N before renaming it
  e.in_flight_name = m[4].length() > 0 || n.rfind("tmp-", 0) == 0 || n.rfind("tmp_", 0) == 0;
  e.symlink = lst.kind == PathInfo::other;  // a directory that is not one without following links
  if (!e.symlink) walk(p, 0, e.bytes, e.mtime);
  return e;
}

// Megatron (iter_NNNNNNN/) and verl (global_step_N/): the tracker names the last step whose
// save finished; both write it after the save.
void read_tracker(RunFolder& rf, const std::string& dir) {
  rf.megatron_tracker = small_text(join_path(dir, "latest_checkpointed_iteration.txt"));
  if (!rf.megatron_tracker) return;
  std::optional<uint64_t> last;
  const std::string& t = *rf.megatron_tracker;
  if (!t.empty() && t.size() <= 18 &&
      std::all_of(t.begin(), t.end(), [](char c) { return isdigit(static_cast<unsigned char>(c)); }))
    last = std::stoull(t);
  for (auto& e : rf.entries) {
    bool megatron = e.name.rfind("iter_", 0) == 0, verl = e.name.rfind("global_step_", 0) == 0;
    if ((!megatron && !verl) || e.order.size() != 1) continue;
    e.trainer = megatron ? "megatron" : "verl";
    if (last && e.order[0] > *last && e.step_unfinished.empty())
      e.step_unfinished = "newer than latest_checkpointed_iteration.txt (" + t +
                          "): " + (megatron ? "Megatron" : "verl") +
                          " writes the tracker after a save finishes, so this one is in flight or died";
  }
}

// NeMo AutoModel's pointers: a symlink NAME, or NAME.txt holding the path.
void read_pointers(RunFolder& rf, const std::string& dir) {
  for (const char* name : {"LATEST", "LOWEST_VAL"}) {
    std::string link = join_path(dir, name);
    std::optional<std::string> target;
    if (!is_remote_path(link) && stat_path(link, false).kind == PathInfo::other) {
      char buf[4096];
      ssize_t n = readlink(link.c_str(), buf, sizeof buf - 1);
      if (n > 0) target = std::string(buf, static_cast<size_t>(n));
    }
    if (!target) target = small_text(link + ".txt");
    if (target && !target->empty())
      rf.pointers[name] = (*target)[0] == '/' || is_remote_path(*target) ? *target : join_path(dir, *target);
  }
}

void judge_one(RunEntry& e) {
  judge_entry(e);
  if (e.in_flight_name && e.complete) {  // named as a save in flight: never the one to use
    e.complete = false;
    e.problems = 1;
    e.why_incomplete = e.name.rfind("tmp_", 0) == 0 ? "its name marks a save in flight: torch_checkpointing writes " +
                                                          e.name + "/ and renames it to " + e.name.substr(4) +
                                                          "/ once every rank has written, so this save "
                                                          "is in flight or was killed before its commit"
                                                    : "its name marks a save in flight";
  }
}

// The entries `judge` asks for opened and checked (sorted oldest first).
void judge_entries(RunFolder& rf, Judge judge) {
  if (judge == Judge::All)
    for (auto& e : rf.entries) judge_one(e);
  if (judge == Judge::NewestComplete)
    for (auto it = rf.entries.rbegin(); it != rf.entries.rend(); ++it) {
      judge_one(*it);
      if (it->complete) break;
    }
  for (auto& e : rf.entries)
    if (!e.judged && judge != Judge::None) e.why_incomplete = "not checked: a newer checkpoint is complete";
}

}  // namespace

std::optional<RunFolder> scan_run_folder(const std::string& dir, Judge judge) {
  auto t0 = std::chrono::steady_clock::now();
  if (!is_directory(dir) || holds_checkpoint_files(dir)) return std::nullopt;
  RunFolder rf;
  rf.dir = dir;
  for (const auto& n : list_dir(dir)) {
    // .dcpctl-prune-*: the remains of a prune that was interrupted; never a checkpoint to use.
    if (n.rfind(".dcpctl-prune-", 0) == 0) {
      rf.prune_leftovers.push_back(join_path(dir, n));
      continue;
    }
    if (std::optional<RunEntry> e = run_entry(dir, n)) rf.entries.push_back(std::move(*e));
  }
  if (rf.entries.empty() && rf.prune_leftovers.empty()) return std::nullopt;
  read_tracker(rf, dir);
  read_pointers(rf, dir);
  std::sort(rf.entries.begin(), rf.entries.end(), [](const RunEntry& a, const RunEntry& b) {
    return a.order != b.order ? a.order < b.order : a.name < b.name;
  });
  judge_entries(rf, judge);
  rf.seconds = seconds_since(t0);
  return rf;
}

std::optional<std::string> run_folder_refusal(const std::string& dir) {
  auto rf = scan_run_folder(dir, Judge::NewestComplete);
  if (!rf) return std::nullopt;
  std::string names;
  size_t shown = 0;
  for (const auto& e : rf->entries) {
    if (shown++ == 12) {
      names += ", ... (" + std::to_string(rf->entries.size()) + " in all)";
      break;
    }
    names += (names.empty() ? "" : ", ") + e.name;
  }
  const RunEntry* newest = rf->newest_complete();
  return "is a run folder (" + names + "); " +
         (newest ? "the newest complete checkpoint is " + newest->path
                 : std::string("none of its checkpoints is complete")) +
         " (dcpctl ls lists them; dcpctl latest prints the newest complete one)";
}

}  // namespace dcpctl
