#include "write/torch_save.h"

namespace dcpctl {

void pickle_tensor(Pickler& p, DType dtype, const std::vector<int64_t>& shape, const std::string& key) {
  const DTypeInfo& di = info(dtype);
  bool typed = *di.storage_class != '\0';
  uint64_t numel = 1;
  for (int64_t s : shape) numel *= static_cast<uint64_t>(s);
  p.global("torch._utils", typed ? "_rebuild_tensor_v2" : "_rebuild_tensor_v3");
  p.mark();
  // storage: persistent id ('storage', storage_type, key, location, count)
  p.mark();
  p.str("storage", true);
  if (typed)
    p.global("torch", di.storage_class);
  else
    p.global("torch.storage", "UntypedStorage");
  p.str(key);
  p.str("cpu", true);
  p.integer(static_cast<int64_t>(typed ? numel : numel * di.itemsize));
  p.tuple_from_mark();
  p.binpersid();
  p.integer(0);  // storage_offset
  p.mark();
  for (int64_t s : shape) p.integer(s);
  p.tuple_from_mark();
  p.mark();  // C-contiguous strides
  std::vector<int64_t> stride(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) stride[d - 1] = stride[d] * shape[d];
  for (int64_t s : stride) p.integer(s);
  p.tuple_from_mark();
  p.boolean(false);  // requires_grad
  p.global("collections", "OrderedDict");
  p.empty_tuple();
  p.reduce();  // backward hooks: OrderedDict()
  if (!typed) p.global("torch", di.torch_name);
  p.tuple_from_mark();
  p.reduce();
}

}  // namespace dcpctl
