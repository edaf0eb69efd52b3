// write/resume's journal: a file recorded as finished is kept by the run that resumes only while
// its size and digest are as recorded, everything else in the folder is removed, and a plan that
// changed is refused naming what changed (the flags first, the data files without their digests).
// The end-to-end test (tests/interop/resume_test.py) kills real runs; this one drives the journal
// itself, under ASan too.
#include <catch2/catch.hpp>

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "meta/manifest.h"
#include "store/file.h"
#include "util/build_id.h"
#include "util/error.h"
#include "write/output.h"
#include "write/resume.h"

using namespace dcpctl;
using nlohmann::json;

namespace {

std::string make_dir() {
  char tmpl[] = "/tmp/dcpctl-resume-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  return tmpl;
}

void put(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

FileDigest digest_of(const std::string& path) {
  return digest_files(path, 1, nullptr, nullptr, ManifestAlgorithm::Crc32).begin()->second;
}

json plan_with(const std::string& outtype) {
  return {{"dcpctl", "0.1.0"},
          {"options", {{"--outtype", outtype}, {"--dtype", ""}}},
          {"files", {{"a.gguf", "11"}, {"b.gguf", "22"}}}};
}

// A stopped run's folder: `a.gguf` and `b.gguf` finished and journaled, `c.gguf` written but not
// journaled, a temporary of an unfinished file.
std::string stopped_run() {
  const std::string dir = make_dir();
  ResumeJournal j(plan_with("f16"), ManifestAlgorithm::Crc32, "");
  j.start(dir);
  for (const char* name : {"a.gguf", "b.gguf"}) {
    put(join_path(dir, name), std::string(4096, name[0]));
    j.finished(name, digest_of(join_path(dir, name)));
  }
  put(join_path(dir, "c.gguf"), "not journaled");
  put(join_path(dir, ".d.gguf.dcpctl-tmp-1-2@host"), "unfinished");
  REQUIRE(j.finished_files() == 2);
  return dir;
}

}  // namespace

TEST_CASE("resume: the journal keeps the files as recorded and removes the rest") {
  const std::string dir = stopped_run(), taken = dir + "-taken";
  ResumeJournal k(plan_with("f16"), ManifestAlgorithm::Crc32, dir);
  CHECK(k.recorded_files() == 2);
  REQUIRE(::rename(dir.c_str(), taken.c_str()) == 0);  // as OutputDir takes a stopped run's folder over
  k.start(taken);
  CHECK(k.kept("a.gguf"));
  CHECK(k.kept("b.gguf"));
  CHECK_FALSE(k.kept("c.gguf"));
  CHECK(list_dir(taken) == std::vector<std::string>{".dcpctl-resume.json", "a.gguf", "b.gguf"});
  CHECK(k.kept_digest("a.gguf")->size == 4096);
  k.remove();
  CHECK(list_dir(taken) == std::vector<std::string>{"a.gguf", "b.gguf"});
  remove_tree(taken);
}

TEST_CASE("resume: a torn or changed file is written again") {
  const std::string dir = stopped_run();
  REQUIRE(::truncate(join_path(dir, "a.gguf").c_str(), 4000) == 0);  // cut short
  put(join_path(dir, "b.gguf"), std::string(4095, 'b') + "x");       // the same size, one byte changed
  ResumeJournal k(plan_with("f16"), ManifestAlgorithm::Crc32, dir);
  k.start(dir);
  CHECK_FALSE(k.kept("a.gguf"));
  CHECK_FALSE(k.kept("b.gguf"));
  CHECK(k.summary()["torn"] == json::array({"a.gguf", "b.gguf"}));
  CHECK(list_dir(dir) == std::vector<std::string>{".dcpctl-resume.json"});
  remove_tree(dir);
}

TEST_CASE("resume: a changed plan is refused, naming the flag") {
  const std::string dir = stopped_run();
  try {
    ResumeJournal k(plan_with("q8_0"), ManifestAlgorithm::Crc32, dir);
    FAIL("a changed --outtype was not refused");
  } catch (const UsageError& e) {
    CHECK_THAT(e.what(), Catch::Contains("--outtype was \"f16\", now \"q8_0\""));
  }
  // Another manifest algorithm is another digest of every file.
  CHECK_THROWS_AS(ResumeJournal(plan_with("f16"), ManifestAlgorithm::Sha256, dir), UsageError);
  remove_tree(dir);
}

TEST_CASE("resume: what changed, flags first, data files without their digests") {
  json was = plan_with("f16"), now = plan_with("f16");
  CHECK(plan_changes(was, now).empty());
  now["options"]["--dtype"] = "bfloat16";
  now["files"]["b.gguf"] = "33";
  CHECK(plan_changes(was, now) ==
        "--dtype was (none), now \"bfloat16\"; the header of a data file (its tensors, dtypes, offsets or keys) "
        "changed");
  now = plan_with("f16");
  now["files"]["c.gguf"] = "44";
  CHECK(plan_changes(was, now) == "the data files were 2, now 3");
}

TEST_CASE("resume: the plan's dcpctl is the version and the executable's build ID") {
  // Debian's linker writes a build ID by default (a SHA-1 of the program: 40 hex digits); a fix
  // built between the crash and the resume is another build, so another plan.
  const std::string id = build_id();
  REQUIRE(id.size() == 40);
  CHECK(id.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(build_id() == id);
  json was = plan_with("f16"), now = plan_with("f16");
  was["dcpctl"] = "0.1.0 (build " + id + ")";
  now["dcpctl"] = "0.1.0 (build " + std::string(40, '0') + ")";
  CHECK_THAT(plan_changes(was, now), Catch::StartsWith("dcpctl was \"0.1.0 (build " + id));
}

TEST_CASE("resume: a journal that is not one is refused, not trusted") {
  const std::string dir = make_dir();
  CHECK_THROWS_AS(ResumeJournal(plan_with("f16"), ManifestAlgorithm::Crc32, dir), UsageError);  // none
  put(join_path(dir, kResumeJournal), "{\"format\": \"dcpctl-resume\", \"files\": [");
  CHECK_THROWS_AS(ResumeJournal(plan_with("f16"), ManifestAlgorithm::Crc32, dir), UsageError);
  remove_tree(dir);
}
