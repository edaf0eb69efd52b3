// bench: the JSON and table renderings, the PCIe link reader, the host side and a host-only run.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>

#include "bench/pattern.h"
#include "bench/pcie.h"
#include "bench/report.h"
#include "bench/staging.h"

using namespace dcpctl;
using namespace dcpctl::bench;
using nlohmann::json;

namespace {

std::string temp_dir() {
  char tmpl[] = "/tmp/dcpctl-bench-test-XXXXXX";
  const char* d = ::mkdtemp(tmpl);
  REQUIRE(d);
  return d;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
}

StagingReport sample_report() {
  StagingReport r;
  r.sizes = {4u << 20};
  r.modes = {"pinned", "cold"};
  r.iters = 3;
  r.warmup = 1;
  r.cuda.compiled = true;
  r.cuda.kernels = true;
  r.cuda.toolkit = "13.0.88";
  r.cuda.runtime_version = 13000;
  r.cuda.driver_version = 13000;
  r.cuda.device_count = 1;
  r.cuda.usable = true;
  r.device = DeviceInfo{0, "NVIDIA H200", "00000000:19:00.0", uint64_t(141) << 30, 9, 0, 2};
  PcieLink p;
  p.bus_id = "0000:19:00.0";
  p.speed_gts = 32.0;
  p.width = 16;
  p.max_speed_gts = 32.0;
  p.max_width = 16;
  p.numa_node = 0;
  r.pcie = p;
  r.host.cpu_threads = 16;
  r.host.memory_bytes = uint64_t(128) << 30;
  r.pinned_memory = "cudaHostAlloc";
  Row a;
  a.mode = "pinned";
  a.direction = "d2h";
  a.memory = "page-locked (cudaHostAlloc), cached";
  a.label = "4 MiB";
  a.bytes = 4u << 20;
  a.copies = 1;
  a.timing = "cuda-events";
  a.iters = 3;
  a.warmup = 1;
  a.seconds = summarize({1e-4, 2e-4, 4e-4});
  a.pin_seconds = summarize({0.002});
  a.host_bytes = a.host_bytes_locked_between_saves = 4u << 20;
  a.verified = true;
  Row b;
  b.mode = "cold";
  b.direction = "d2h";
  b.label = "4 MiB";
  b.bytes = 4u << 20;
  b.status = "skipped";
  b.reason = "mlock(4 MiB) failed";
  r.rows = {a, b};
  r.notes = {"a note"};
  return r;
}

}  // namespace

TEST_CASE("bench report: JSON fields", "[bench]") {
  json j = staging_json(sample_report());
  CHECK(j["schema_version"] == 1);
  CHECK(j["benchmark"] == "staging");
  CHECK(j["host_only"] == false);
  CHECK(j["config"]["iters"] == 3);
  CHECK(j["config"]["sizes"] == json::array({4194304}));
  CHECK(j["checkpoint"].is_null());
  CHECK(j["cuda"]["runtime_version"] == "13.0");
  CHECK(j["cuda"]["gate"] == "spin-kernel");
  CHECK(j["device"]["name"] == "NVIDIA H200");
  CHECK(j["device"]["compute_capability"] == "9.0");
  CHECK(j["pcie"]["generation"] == 5);
  CHECK(j["pcie"]["theoretical_gbps"].get<double>() == Approx(63.015).epsilon(1e-3));
  CHECK(j["host"]["memlock_limit_bytes"].is_null());
  REQUIRE(j["results"].size() == 2);
  const json& a = j["results"][0];
  CHECK(a["mode"] == "pinned");
  CHECK(a["seconds"]["median"].get<double>() == Approx(2e-4));
  CHECK(a["gbps"]["median"].get<double>() == Approx(4194304 / 2e-4 / 1e9));
  CHECK(a["gbps"]["min"].get<double>() == Approx(4194304 / 4e-4 / 1e9));
  CHECK(a["gbps"]["max"].get<double>() == Approx(4194304 / 1e-4 / 1e9));
  CHECK(a["pin_seconds_per_gib"].get<double>() == Approx(0.002 * 256));
  CHECK(a["verified"] == true);
  CHECK(a["status"] == "ok");
  const json& b = j["results"][1];
  CHECK(b["status"] == "skipped");
  CHECK(b["seconds"].is_null());
  CHECK(b["gbps"].is_null());
  CHECK(b["verified"].is_null());
  CHECK(j["notes"] == json::array({"a note"}));
  // Every value is finite JSON: a dump/parse round trip keeps it.
  CHECK(json::parse(j.dump()) == j);
}

TEST_CASE("bench report: table", "[bench]") {
  const std::string t = staging_table(sample_report());
  CHECK(t.find("GPU     NVIDIA H200") != std::string::npos);
  CHECK(t.find("32.0 GT/s x16 (Gen5)") != std::string::npos);
  CHECK(t.find("NUMA node 0") != std::string::npos);
  CHECK(t.find("pinned") != std::string::npos);
  CHECK(t.find("200 us") != std::string::npos);
  CHECK(t.find("21.0") != std::string::npos);  // 4 MiB / 200 us = 20.97 GB/s
  CHECK(t.find("skipped: mlock(4 MiB) failed") != std::string::npos);
  CHECK(t.find("Note: a note") != std::string::npos);
  CHECK(format_seconds(0.5) == "500 ms");
  CHECK(format_seconds(0.0123) == "12.3 ms");
  CHECK(format_seconds(2.0) == "2.00 s");
  CHECK(format_seconds(12e-6) == "12.0 us");
}

TEST_CASE("bench pcie: sysfs link", "[bench]") {
  CHECK(normalize_bus_id("00000000:19:00.0") == "0000:19:00.0");
  CHECK(normalize_bus_id("0000:AB:00.0") == "0000:ab:00.0");
  const std::string root = temp_dir();
  const std::string dev = root + "/bus/pci/devices/0000:19:00.0";
  REQUIRE(std::system(("mkdir -p '" + dev + "'").c_str()) == 0);
  write_text(dev + "/current_link_speed", "16.0 GT/s PCIe\n");
  write_text(dev + "/current_link_width", "8\n");
  write_text(dev + "/max_link_speed", "32.0 GT/s PCIe\n");
  write_text(dev + "/max_link_width", "16\n");
  write_text(dev + "/numa_node", "-1\n");
  PcieLink l = read_pcie_link("00000000:19:00.0", root);
  CHECK(l.known());
  CHECK(*l.speed_gts == 16.0);
  CHECK(*l.width == 8);
  CHECK(*l.max_speed_gts == 32.0);
  CHECK(*l.max_width == 16);
  CHECK_FALSE(l.numa_node);
  CHECK(*l.generation() == 4);
  CHECK(*l.theoretical_gbps() == Approx(16.0 * 8 * 128 / 130 / 8));
  write_text(dev + "/current_link_speed", "Unknown\n");
  l = read_pcie_link("0000:19:00.0", root);
  CHECK_FALSE(l.speed_gts);
  CHECK_FALSE(l.theoretical_gbps());
  CHECK_FALSE(read_pcie_link("0000:00:00.0", root).known());
  CHECK_FALSE(read_pcie_link("../../etc", root).known());
  REQUIRE(std::system(("rm -rf '" + root + "'").c_str()) == 0);
}

TEST_CASE("bench host: copies, files and their checks", "[bench]") {
  const uint64_t n = 1 << 20;
  HostBuffer src = HostBuffer::pageable(n), dst = HostBuffer::pageable(n);
  fill_pattern(src.data(), 0, n);
  std::memset(dst.data(), 0, n);
  const Layout l = contiguous(n, 100000);
  CHECK(host_copy(dst.data(), src.data(), l.segments, 3) >= 0);
  CHECK(find_mismatch(dst.data(), 0, n) == n);

  const std::string dir = temp_dir();
  const std::string f = dir + "/staged";
  CHECK(timed_file_write(f, src.data(), n, true) > 0);
  CHECK(file_pattern_mismatch(f, n) == n);
  CHECK(file_pattern_mismatch(f, n + 1) == n);                          // shorter than expected
  CHECK_THROWS_AS(timed_file_write(f, src.data(), n, false), IoError);  // exists: never overwritten
  ::unlink(f.c_str());
  src.data()[77] ^= 1;
  timed_file_write(f, src.data(), n, false);
  CHECK(file_pattern_mismatch(f, n) == 77);
  ::unlink(f.c_str());
  ::rmdir(dir.c_str());

  // A small lock fits any RLIMIT_MEMLOCK; the failure path is a LockError, never a crash.
  HostBuffer locked = HostBuffer::mlocked(4096);
  CHECK(locked.kind() == HostBuffer::Kind::mlocked);
  HostInfo h = host_info();
  if (h.memlock_limit && !h.memlock_exempt && *h.memlock_limit < (uint64_t(1) << 30))
    CHECK_THROWS_AS(HostBuffer::mlocked(2 * *h.memlock_limit + 4096), LockError);
}

TEST_CASE("bench staging: host-only run measures and checks every row", "[bench]") {
  StagingOptions o;
  o.sizes = {4096, 1 << 20};
  o.iters = 3;
  o.warmup = 1;
  o.host_only = true;
  o.streams = 2;
  const std::string dir = temp_dir();
  o.write_to = dir;
  o.fsync = true;
  o.checkpoint = std::string(DCPCTL_SOURCE_DIR) + "/tests/fixtures/sample/ckpt";
  o.rank = 1;
  StagingReport r = run_staging(o);
  CHECK(r.count("failed") == 0);
  // 2 sizes x (4 modes + write + write-fsync), then per-tensor, flat, write, write-fsync.
  REQUIRE(r.rows.size() == 2 * 6 + 4);
  for (const Row& row : r.rows) {
    INFO(row.mode << " " << row.label << ": " << row.reason);
    if (row.status == "skipped") {
      CHECK(row.reason.find("mlock") != std::string::npos);
      continue;
    }
    CHECK(row.status == "ok");
    CHECK(row.verified == std::optional<bool>(true));
    CHECK(row.seconds.n == 3);
    CHECK(row.timing == "host-clock");
  }
  CHECK(r.rows[0].copies == 1);  // 4 KiB over 2 threads: one page-sized piece
  CHECK(r.rows[6].copies == 2);  // 1 MiB: one piece per thread
  CHECK(r.rows[12].mode == "per-tensor");
  CHECK(r.rows[12].copies == r.checkpoint->chunks);
  CHECK(r.rows[13].mode == "flat");
  CHECK(r.rows[13].copies == 1);
  CHECK(r.rows[13].bytes == r.rows[12].bytes);
  if (!cuda_probe().usable) {
    o.host_only = false;
    CHECK_THROWS_AS(run_staging(o), UnsupportedError);
  }
  CHECK(::rmdir(dir.c_str()) == 0);  // the scratch files are gone
  o.host_only = true;
  o.write_to = "/nonexistent-dir";
  CHECK_THROWS_AS(run_staging(o), IoError);
  o.write_to.clear();
  CHECK_THROWS_AS(run_staging(o), UsageError);  // --fsync without --write-to
  o.fsync = false;
  o.modes = {"bogus"};
  CHECK_THROWS_AS(run_staging(o), UsageError);
}
