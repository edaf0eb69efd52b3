// Metadata models built in memory for the planner's unit tests (test_write_plan, test_deal): a
// tensor split into given chunks over given files, and a checkpoint of such tensors.
#pragma once

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "meta/checkpoint.h"
#include "meta/geometry.h"
#include "util/dtype.h"

namespace dcpctl {

// A tensor of `shape` split into `chunks`, each {offsets..., sizes...}, chunk i in file i % files.
inline TensorMeta tensor(std::string fqn, std::vector<int64_t> shape, std::vector<std::vector<int64_t>> chunks,
                         DType dt = DType::Float32, uint32_t files = 1) {
  TensorMeta t;
  t.fqn = std::move(fqn);
  t.dtype = dt;
  t.dtype_name = torch_name(dt);
  t.shape = shape;
  for (size_t i = 0; i < chunks.size(); ++i) {
    REQUIRE(chunks[i].size() == 2 * shape.size());
    t.chunk_dims.insert(t.chunk_dims.end(), chunks[i].begin(), chunks[i].end());
    StorageRef r;
    r.file = static_cast<uint32_t>(i % files);
    t.storage.push_back(r);
  }
  return t;
}

// A checkpoint of these tensors, saved by `ranks` ranks (files __r_0.distcp).
inline Checkpoint checkpoint(std::vector<TensorMeta> tensors, uint32_t ranks = 1) {
  Checkpoint ck;
  ck.dir = "/nonexistent/ckpt";
  ck.metadata_path = ck.dir + "/.metadata";
  for (uint32_t r = 0; r < ranks; ++r) ck.md.files.push_back("__" + std::to_string(r) + "_0.distcp");
  for (auto& t : tensors) {
    ck.md.order.emplace_back(true, static_cast<uint32_t>(ck.md.tensors.size()));
    ck.md.tensors.push_back(std::move(t));
  }
  return ck;
}

inline Box box(std::vector<int64_t> offsets, std::vector<int64_t> sizes) {
  return {std::move(offsets), std::move(sizes)};
}

}  // namespace dcpctl
