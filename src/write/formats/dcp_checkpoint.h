// The `dcp` format's writer (dcp_checkpoint.cpp), for the formats that are a DCP checkpoint with
// something beside it (megatron.cpp: megatron-core's torch_dist checkpoint).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dcpctl {

class OutputWriter;
struct Format;
struct ReshardOptions;
struct WriteJob;

// What a format adds to the DCP checkpoint it writes.
struct DcpAdditions {
  // The checkpoint's folder inside the output ("iter_0000003"); empty: the output itself.
  std::string subdir;
  // Non-tensor items made in memory (key, the item's torch.save bytes), written after the
  // source's own in rank 0's file and listed in .metadata as bytes items.
  std::vector<std::pair<std::string, std::vector<uint8_t>>> items;
  // Source non-tensor items written with other bytes (key -> the item's torch.save bytes), in
  // their place: megatron's common state under --iteration N.
  std::map<std::string, std::vector<uint8_t>> replaced;
  // Small files (path inside the output, content), written before .metadata.
  std::vector<std::pair<std::string, std::string>> files;
};

// Asked on every rank once the write is planned (the same answer on every rank: it may read only
// the plan and the options); it may refuse the plan by throwing.
using DcpAdd = std::function<DcpAdditions(const WriteJob& job)>;

std::unique_ptr<OutputWriter> dcp_writer(const ReshardOptions& o, DcpAdd add);

// The `dcp` row (plan/format.h), which a format built on it starts from: built by a function, not
// copied from formats::dcp, whose initialisation another file's cannot wait for.
Format dcp_row();

}  // namespace dcpctl
