// dcpctl verify: every structural check, collecting all problems; --deep decodes every item.
#include <iostream>

#include "cmd/format.h"
#include "cmd/subcommands.h"
#include "report/verify.h"
#include "store/file.h"
#include "util/error.h"
#include "util/size.h"
#include "write/assets.h"
#include "write/manifest.h"

namespace dcpctl::cli {

using nlohmann::json;

struct VerifyCliOptions {
  std::string checkpoint;
  bool json = false;
  bool deep = false;
  bool checksum = false;
  unsigned threads = 0;
  std::string max_memory;
  std::string io = "direct";
  std::string expect_assets;
  bool require_mtp = false;
  bool write_manifest = false;
  std::string manifest = "crc32";
};

static void print_findings(const json& list, const char* title) {
  if (list.empty()) return;
  std::cout << title << "\n";
  for (const auto& p : list) {
    std::string where = p["file"].get<std::string>();
    if (!p["offset"].is_null()) where += ": offset " + std::to_string(p["offset"].get<uint64_t>());
    if (!p["key"].get<std::string>().empty()) where += ": key '" + p["key"].get<std::string>() + "'";
    std::cout << "  [" << p["code"].get<std::string>() << "] " << where << ": " << p["message"].get<std::string>()
              << "\n";
  }
}

int run_verify(const VerifyCliOptions& o) {
  VerifyOptions vo;
  vo.deep = o.deep;
  vo.checksum = o.checksum;
  vo.threads = o.threads;
  vo.io = o.io == "buffered" ? VerifyOptions::Io::Buffered : VerifyOptions::Io::Direct;  // "auto": direct
  if (!o.max_memory.empty()) vo.max_memory = parse_size(o.max_memory, "--max-memory");
  vo.hf.require_mtp = o.require_mtp;
  if (!o.expect_assets.empty()) {
    if (!is_directory(o.expect_assets)) throw UsageError(Where(o.expect_assets), "--expect-assets: not a directory");
    for (const auto& n : list_dir(o.expect_assets))
      if (is_asset_name(n) && stat_path(join_path(o.expect_assets, n)).kind == PathInfo::file)
        vo.hf.expect_files.push_back(n);
  }
  json r = verify_checkpoint(o.checkpoint, vo);
  bool ok = r["ok"].get<bool>();
  if (o.json) {
    add_s3_transfer(r);
    std::cout << r.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
  } else {
    const json& c = r["checked"];
    print_findings(r["problems"], "Problems:");
    print_findings(r["warnings"], "Warnings:");
    print_findings(r["notes"], "Notes:");
    if (r.contains("checksums"))
      for (const auto& [k, v] : r["checksums"].items()) std::cout << v.get<std::string>() << "  " << k << "\n";
    std::cout << (ok ? "OK" : "FAILED") << ": " << r["problems"].size() << " problem(s); checked " << c["files"]
              << " files, " << c["tensors"] << " tensors in " << c["chunks"] << " chunks, " << c["bytes_items"]
              << " non-tensor items";
    if (r["deep"].get<bool>())
      std::cout << ", decoded " << human_bytes(c["bytes_read"].get<uint64_t>()) << " of tensor data";
    if (const json& i = r["integrity"]; !i.is_null())
      std::cout << "; integrity.json: " << i["files"] << " files, hashed "
                << human_bytes(i["bytes_read"].get<uint64_t>());
    if (const json& m = r["manifest"]; !m.is_null())
      std::cout << "; " << kManifestFile << ": " << m["files"] << " files, hashed "
                << human_bytes(m["bytes_read"].get<uint64_t>());
    std::cout << "\n";
  }
  // --write-manifest: only for a checkpoint that passed, so the manifest vouches for good bytes.
  if (o.write_manifest && ok) {
    const Manifest m = make_manifest(o.checkpoint, o.checkpoint, "verify --write-manifest", "",
                                     o.threads ? o.threads : 4, true, nullptr, *algorithm_named(o.manifest));
    write_manifest_file(o.checkpoint, m);
    std::cerr << "wrote " << manifest_path(o.checkpoint) << " (" << m.files.size() << " files"
              << (m.tensors ? ", " + std::to_string(m.tensors->size()) + " tensors" : std::string()) << ")\n";
  } else if (o.write_manifest) {
    std::cerr << "no manifest written: the checkpoint has problems\n";
  }
  if (r.value("unsupported", false)) return static_cast<int>(ExitCode::unsupported);
  return ok ? 0 : static_cast<int>(ExitCode::invalid);
}

void setup_verify(CLI::App& parent, RunFn& run) {
  auto o = std::make_shared<VerifyCliOptions>();
  auto* sub = parent.add_subcommand("verify",
                                    "Check a checkpoint for every problem: files, windows, chunk tiling, megatron's "
                                    "integrity.json; --deep decodes items");
  sub->add_option(
         "checkpoint", o->checkpoint,
         "Checkpoint: a DCP directory (any layout), an HF safetensors directory, a .safetensors or a .gguf file")
      ->required()
      ->type_name("DIR");
  sub->add_flag("--json", o->json, "Print the report as JSON (schema_version 1) on stdout");
  sub->add_flag(
      "--deep", o->deep,
      "Also read every item: its dtype, shape and length against .metadata, and the CRC-32 of every record it holds");
  sub->add_flag("--checksum", o->checksum,
                "With --deep: print the SHA-256 of every full tensor (C order, little-endian)");
  sub->add_option("--threads", o->threads,
                  "Reader threads for --deep (0 = all cores; with --io direct at least 8, as its reads wait on the "
                  "disk); --checksum hashes on as many, at most one a core")
      ->capture_default_str()
      ->type_name("N");
  sub->add_option("--max-memory", o->max_memory, "Cap on --deep/--checksum buffer memory (default 1GiB)")
      ->type_name("SIZE");
  sub->add_option(
         "--io", o->io,
         "How --deep reads tensor data: direct (past the page cache where the filesystem allows it, for runs of "
         "1 MiB or more not already cached: less CPU, and the page cache is left to what it holds) or buffered "
         "(through it, with the kernel's read-ahead); auto is direct")
      ->check(CLI::IsMember({"auto", "direct", "buffered"}))
      ->capture_default_str()
      ->type_name("MODE");
  sub->add_option(
         "--expect-assets", o->expect_assets,
         "A Hugging Face folder: the config, tokenizer and generation config files of DIR (what consolidate --assets "
         "copies) must be beside the weights too (sidecar-missing)")
      ->type_name("DIR");
  sub->add_flag("--require-mtp", o->require_mtp,
                "A Hugging Face folder: every MTP layer num_nextn_predict_layers counts must be there (none at all is "
                "otherwise a warning, as transformers' save_pretrained leaves them out)");
  sub->add_flag(
      "--write-manifest", o->write_manifest,
      "When the checks pass, write dcpctl-manifest.json (every file's size and digest, every tensor's digest, "
      "in --manifest's algorithm) into the checkpoint folder, or FILE.dcpctl-manifest.json beside a file; later "
      "runs of verify check it");
  sub->add_option("--manifest", o->manifest,
                  "The digest --write-manifest records: crc32 (zip's CRC-32; catches accidental damage) or sha256 "
                  "(cryptographic, slower)")
      ->check(CLI::IsMember({"crc32", "sha256"}))
      ->capture_default_str()
      ->type_name("ALGO");
  sub->callback([&run, o] { run = [o] { return run_verify(*o); }; });
}

}  // namespace dcpctl::cli
