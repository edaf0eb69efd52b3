// dcpctl.open(path): a checkpoint opened for reads from Python, over the inputs diff and stats read
// (compare/input.h: every layout of the readers' table, torch.save files, GGUF, s3:// and gs://).
//
// A tensor, or a box of one, is read by item/read_box.h into a buffer of its own that the returned
// array owns (NumPy's, and torch's through DLPack, share it: no copy), with the GIL released: reads
// from several Python threads run at once (the ItemReader is safe from several threads). close()
// waits for the reads in flight; a read after it raises ValueError.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <memory>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "compare/input.h"

namespace dcpctl::py {

namespace nb = nanobind;

class OpenCheckpoint {
 public:
  // `max_memory`: what a read may hold beyond the array it returns (the CLI's --max-memory).
  OpenCheckpoint(const std::string& path, uint64_t max_memory, unsigned threads);
  std::vector<std::string> keys() const;    // tensors, in the checkpoint's order
  std::vector<std::string> values() const;  // non-tensor items
  bool contains(const std::string& key) const;
  nb::dict info(const std::string& key) const;
  // The dense bytes of box [offsets, offsets + sizes) of tensor `key`, C order, as a flat uint8
  // NumPy array that owns them. `check_records`: item/read_box.h's complete_records.
  nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>> read(const std::string& key, const std::vector<int64_t>& offsets,
                                                    const std::vector<int64_t>& sizes, bool check_records);
  std::string value(const std::string& key) const;  // a non-tensor item as Python would repr it
  nb::dict describe() const;                        // path, layout, counts
  void close();

 private:
  const TensorMeta& tensor(const std::string& key) const;  // KeyError when absent
  void require_open() const;

  std::unique_ptr<Input> in_;
  uint64_t max_memory_;
  unsigned threads_;
  std::unordered_map<std::string, size_t> tensors_, bytes_;
  mutable std::shared_mutex mu_;  // reads share it; close() takes it alone
};

void bind_checkpoint(nb::module_& m);

}  // namespace dcpctl::py
