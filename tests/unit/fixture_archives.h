// Every torch.save archive real torch wrote into tests/fixtures: each untransformed torch.save item
// of every DCP checkpoint there, and every .pt file. The oracle corpus of the zip reader's and
// the zip writer's tests (test_zip_directory.cpp, test_torch_zip_writer.cpp).
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "meta/checkpoint.h"

struct FixtureArchive {
  std::string what;  // file@offset, or the .pt's path
  std::vector<uint8_t> bytes;
};

inline std::vector<uint8_t> slurp(const std::string& path, uint64_t offset, uint64_t length) {
  std::ifstream f(path, std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  std::vector<uint8_t> out(length);
  f.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(length));
  REQUIRE(static_cast<uint64_t>(f.gcount()) == length);
  return out;
}

inline std::vector<FixtureArchive> fixture_archives() {
  namespace fs = std::filesystem;
  using namespace dcpctl;
  std::vector<FixtureArchive> out;
  const fs::path root = fs::path(DCPCTL_SOURCE_DIR) / "tests" / "fixtures";
  std::vector<fs::path> paths;
  for (const auto& e : fs::recursive_directory_iterator(root)) paths.push_back(e.path());
  std::sort(paths.begin(), paths.end());
  for (const fs::path& p : paths) {
    if (p.filename() == ".metadata") {
      std::optional<Checkpoint> ck;
      try {
        ck = open_checkpoint(p.parent_path().string());
      } catch (const Error&) {
        continue;  // a layout this reader opens another way (covered by its .pt files below)
      }
      std::vector<StorageRef> refs;
      for (const auto& t : ck->md.tensors) refs.insert(refs.end(), t.storage.begin(), t.storage.end());
      for (const auto& b : ck->md.bytes) refs.push_back(b.storage);
      for (const StorageRef& r : refs) {
        if (!r.present() || r.transforms != 0 || r.format != ItemFormat::TorchSave) continue;
        std::string file = (p.parent_path() / ck->md.files[r.file]).string();
        out.push_back({file + "@" + std::to_string(r.offset), slurp(file, r.offset, r.length)});
      }
    } else if (p.extension() == ".pt") {
      out.push_back({p.string(), slurp(p.string(), 0, fs::file_size(p))});
    }
  }
  return out;
}
