// dcpctl compat: a copy of a torch 2.15 checkpoint that torch 2.14 and older load, its data files
// linked rather than copied (src/write/compat.h).
#include <iostream>

#include "cmd/format.h"
#include "cmd/subcommands.h"
#include "util/error.h"
#include "write/compat.h"

namespace dcpctl::cli {

using nlohmann::json;

struct CompatCliOptions {
  std::string checkpoint, output, link = "auto";
  bool force = false, json = false, quiet = false;
};

namespace {

json bound_json(const Metadata::LoaderBound& b) {
  return {{"oldest", b.release.empty() ? json(nullptr) : json(b.release)},
          {"reason", b.reason.empty() ? json(nullptr) : json(b.reason)}};
}

LinkMode parse_link(const std::string& s) {
  if (s == "reflink") return LinkMode::Reflink;
  if (s == "hard") return LinkMode::Hard;
  if (s == "copy") return LinkMode::Copy;
  return LinkMode::Auto;
}

}  // namespace

int run_compat(const CompatCliOptions& o) {
  Checkpoint ck = open_checkpoint(o.checkpoint);
  CompatOptions co;
  co.output = o.output;
  co.force = o.force;
  co.link = parse_link(o.link);
  co.note = [quiet = o.quiet](const std::string& s) {
    if (!quiet) std::cerr << "dcpctl: note: " << s << "\n";
  };
  CompatResult r = write_compat(ck, co);
  if (o.json) {
    json j = {
        {"schema_version", 1},
        {"checkpoint", ck.dir},
        {"output", o.output},
        {"link", o.link},
        {"strided_tensors", r.strided_tensors},
        {"loadable_by_before", bound_json(r.before)},
        {"loadable_by", bound_json(r.after)},
        {"files", {{"reflinked", r.files_reflinked}, {"hard_linked", r.files_hard_linked}, {"copied", r.files_copied}}},
        {"bytes", {{"reflinked", r.bytes_reflinked}, {"hard_linked", r.bytes_hard_linked}, {"copied", r.bytes_copied}}},
        {"metadata_bytes", r.metadata_bytes},
        {"seconds", r.seconds}};
    std::cout << j.dump(2) << "\n";
  } else if (!o.quiet) {
    std::cout << "wrote " << o.output << ": a new .metadata (" << human_bytes(r.metadata_bytes) << ", "
              << r.strided_tensors << " TensorProperties without strides)";
    auto part = [&](uint64_t files, uint64_t bytes, const char* how) {
      if (files) std::cout << ", " << files << " file(s) " << how << " (" << human_bytes(bytes) << ")";
    };
    part(r.files_reflinked, r.bytes_reflinked, "reflinked");
    part(r.files_hard_linked, r.bytes_hard_linked, "hard-linked");
    part(r.files_copied, r.bytes_copied, "copied");
    std::cout << "\n";
    std::cout << "loads in torch "
              << (r.after.release.empty() ? std::string("of any release DCP reads") : r.after.release + " or newer");
    if (!r.after.reason.empty()) std::cout << " (" << r.after.reason << ")";
    std::cout << "\n";
    if (r.files_hard_linked)
      std::cout << "hard links share their data with the original: treat both as read-only (as checkpoints are)\n";
  }
  return 0;
}

void setup_compat(CLI::App& parent, RunFn& run) {
  auto o = std::make_shared<CompatCliOptions>();
  auto* sub = parent.add_subcommand("compat",
                                    "Write a copy of a torch 2.15 checkpoint that torch 2.14 and older load (\"too "
                                    "many values to unpack (expected 5)\"): a "
                                    "new .metadata beside the data files, reflinked or hard-linked, not copied");
  sub->add_option("checkpoint", o->checkpoint, "DCP checkpoint directory")->required()->type_name("CKPT");
  sub->add_option("-o,--output", o->output, "Output directory (must not exist unless --force)")
      ->required()
      ->type_name("DIR");
  sub->add_option("--link", o->link,
                  "How the data files are taken over: auto (reflink, else hard link, else copy), reflink, hard, copy")
      ->check(CLI::IsMember({"auto", "reflink", "hard", "copy"}))
      ->type_name("MODE");
  sub->add_flag("--force", o->force, "Replace an existing output");
  sub->add_flag("--json", o->json, "Print what was written as JSON (schema_version 1)");
  sub->add_flag("-q,--quiet", o->quiet, "Print nothing but errors");
  sub->callback([&run, o] { run = [o] { return run_compat(*o); }; });
}

}  // namespace dcpctl::cli
