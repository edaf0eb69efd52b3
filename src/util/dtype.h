// Tensor element types as torch names them, with what every writer needs to know about them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dcpctl {

enum class DType : uint8_t {
  Float32,
  Float64,
  Float16,
  BFloat16,
  Float8_E4M3FN,
  Float8_E5M2,
  Float8_E4M3FNUZ,
  Float8_E5M2FNUZ,
  Float8_E8M0FNU,
  Int8,
  Int16,
  Int32,
  Int64,
  UInt8,
  UInt16,
  UInt32,
  UInt64,
  Bool,
  Complex32,
  Complex64,
  Complex128,
  Float4_E2M1FN_X2,  // two 4-bit floats packed per byte; torch's shapes count bytes, safetensors'
                     // F4 shapes count the 4-bit elements (its last dimension twice torch's)
};

struct DTypeInfo {
  DType dtype;
  const char* torch_name;        // "float32" (torch.float32)
  const char* storage_class;     // legacy typed storage ("FloatStorage"); "" where torch.save
                                 // uses _rebuild_tensor_v3 + UntypedStorage (uint16/32/64, float8, ...)
  const char* safetensors_name;  // "F32", "" when safetensors has no such type
  uint8_t itemsize;
  bool floating;  // real floating point (cast applies)
  bool complex;
};

const DTypeInfo& info(DType d);
inline const char* torch_name(DType d) {
  return info(d).torch_name;
}
inline uint8_t itemsize(DType d) {
  return info(d).itemsize;
}

// torch.<name> as it appears in pickles ("float32", also aliases "float", "half", "long", ...).
std::optional<DType> dtype_from_torch_name(std::string_view name);
// Legacy storage class names from data.pkl ("FloatStorage", "BFloat16Storage", ...).
std::optional<DType> dtype_from_storage_class(std::string_view name);
// What users type on the command line: fp32/float32/f32, bf16, fp8_e4m3, ... (case-insensitive).
std::optional<DType> dtype_from_user(std::string_view name);

}  // namespace dcpctl
