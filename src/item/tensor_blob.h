// What an item's data.pkl says about the tensor it holds.
//
// torch.save(tensor) pickles (protocol 2) one call, never executed here:
//   torch._utils._rebuild_tensor_v2(persid(('storage', torch.<X>Storage, key, location, numel)),
//                                   storage_offset, size, stride, requires_grad, OrderedDict()[, metadata])
// for dtypes with a legacy storage class (FloatStorage, BFloat16Storage, BoolStorage, ...), and
//   torch._utils._rebuild_tensor_v3(persid(('storage', torch.storage.UntypedStorage, key, location, nbytes)),
//                                   storage_offset, size, stride, requires_grad, OrderedDict(), torch.<dtype>[,
//                                   metadata])
// for those without (uint16/32/64, float8_*), where the persid's count is in bytes.
// torch._utils._rebuild_parameter(tensor, requires_grad, hooks) wraps a Parameter; it is unwrapped.
// storage_offset, size and stride count elements. The tensor's bytes are record data/<key>.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pickle/value.h"
#include "util/dtype.h"
#include "util/error.h"

namespace dcpctl {

struct TensorBlob {
  DType dtype = DType::Float32;
  std::vector<int64_t> size, stride;
  int64_t storage_offset = 0;  // elements
  std::string storage_key;     // record data/<key>
  uint64_t storage_bytes = 0;  // as the pickle declares it
  bool contiguous() const;     // C-contiguous (dims of extent 1 ignored)
  uint64_t numel() const;
  // Highest element index (relative to storage start) the view touches, plus one; 0 if empty.
  uint64_t extent() const;
};

// Throws FormatError (with `where`) if the pickle is not a tensor rebuild call dcpctl understands.
TensorBlob interpret_tensor_pickle(const pickle::Value& root, const Where& where);

}  // namespace dcpctl
