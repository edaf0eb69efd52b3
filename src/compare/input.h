// What diff and stats read: any checkpoint open_checkpoint() opens (every DCP layout, a Hugging
// Face directory, one .safetensors file) or a torch.save file (item/torch_file.h), with a reader
// over it. Incomplete inputs are refused (FormatError, exit 3): a comparison that silently
// skipped a missing shard would be a gate that lies.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "item/item_reader.h"
#include "meta/checkpoint.h"

namespace dcpctl {

struct Input {
  std::string path;
  Checkpoint ck;
  std::map<std::string, std::string> inline_values;  // torch.save files: key -> repr of a non-tensor leaf
  std::unique_ptr<ItemReader> reader;                // reads ck (which therefore never moves)
};

std::unique_ptr<Input> open_input(const std::string& path);

// A non-tensor value as Python would repr it (decoded by the restricted VM, never executed).
std::string value_repr(const Input& in, const BytesMeta& b);

// Throws FormatError naming the tensor when its chunks do not tile it exactly (a hole or an
// overlap would make a window's bytes undefined).
void require_tiled(const Input& in, const TensorMeta& t);

}  // namespace dcpctl
