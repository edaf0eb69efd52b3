#include "util/dtype.h"

#include <algorithm>
#include <cctype>
#include <string>

namespace dcpctl {
namespace {

constexpr DTypeInfo kTable[] = {
    {DType::Float32, "float32", "FloatStorage", "F32", 4, true, false},
    {DType::Float64, "float64", "DoubleStorage", "F64", 8, true, false},
    {DType::Float16, "float16", "HalfStorage", "F16", 2, true, false},
    {DType::BFloat16, "bfloat16", "BFloat16Storage", "BF16", 2, true, false},
    {DType::Float8_E4M3FN, "float8_e4m3fn", "", "F8_E4M3", 1, true, false},
    {DType::Float8_E5M2, "float8_e5m2", "", "F8_E5M2", 1, true, false},
    {DType::Float8_E4M3FNUZ, "float8_e4m3fnuz", "", "", 1, true, false},
    {DType::Float8_E5M2FNUZ, "float8_e5m2fnuz", "", "", 1, true, false},
    {DType::Float8_E8M0FNU, "float8_e8m0fnu", "", "F8_E8M0", 1, true, false},
    {DType::Int8, "int8", "CharStorage", "I8", 1, false, false},
    {DType::Int16, "int16", "ShortStorage", "I16", 2, false, false},
    {DType::Int32, "int32", "IntStorage", "I32", 4, false, false},
    {DType::Int64, "int64", "LongStorage", "I64", 8, false, false},
    {DType::UInt8, "uint8", "ByteStorage", "U8", 1, false, false},
    {DType::UInt16, "uint16", "", "U16", 2, false, false},
    {DType::UInt32, "uint32", "", "U32", 4, false, false},
    {DType::UInt64, "uint64", "", "U64", 8, false, false},
    {DType::Bool, "bool", "BoolStorage", "BOOL", 1, false, false},
    {DType::Complex32, "complex32", "", "", 4, false, true},
    {DType::Complex64, "complex64", "ComplexFloatStorage", "C64", 8, false, true},
    {DType::Complex128, "complex128", "ComplexDoubleStorage", "", 16, false, true},
    {DType::Float4_E2M1FN_X2, "float4_e2m1fn_x2", "", "F4", 1, false, false},
};

struct Alias {
  const char* name;
  DType dtype;
};

// torch's own aliases (torch.float is torch.float32, ...), as a pickle may name them.
constexpr Alias kTorchAliases[] = {
    {"float", DType::Float32},    {"double", DType::Float64},     {"half", DType::Float16},
    {"short", DType::Int16},      {"int", DType::Int32},          {"long", DType::Int64},
    {"cfloat", DType::Complex64}, {"cdouble", DType::Complex128}, {"chalf", DType::Complex32},
};

// Spellings users type (lower-cased before lookup).
constexpr Alias kUserAliases[] = {
    {"fp32", DType::Float32},
    {"f32", DType::Float32},
    {"float", DType::Float32},
    {"fp64", DType::Float64},
    {"f64", DType::Float64},
    {"double", DType::Float64},
    {"fp16", DType::Float16},
    {"f16", DType::Float16},
    {"half", DType::Float16},
    {"bf16", DType::BFloat16},
    {"fp8_e4m3", DType::Float8_E4M3FN},
    {"f8_e4m3", DType::Float8_E4M3FN},
    {"e4m3", DType::Float8_E4M3FN},
    {"fp8_e5m2", DType::Float8_E5M2},
    {"f8_e5m2", DType::Float8_E5M2},
    {"e5m2", DType::Float8_E5M2},
};

}  // namespace

const DTypeInfo& info(DType d) {
  return kTable[static_cast<size_t>(d)];
}

std::optional<DType> dtype_from_torch_name(std::string_view name) {
  for (const auto& e : kTable)
    if (name == e.torch_name) return e.dtype;
  for (const auto& a : kTorchAliases)
    if (name == a.name) return a.dtype;
  return std::nullopt;
}

std::optional<DType> dtype_from_storage_class(std::string_view name) {
  for (const auto& e : kTable)
    if (*e.storage_class && name == e.storage_class) return e.dtype;
  return std::nullopt;
}

std::optional<DType> dtype_from_user(std::string_view name) {
  std::string s(name);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s.rfind("torch.", 0) == 0) s = s.substr(6);
  for (const auto& a : kUserAliases)
    if (s == a.name) return a.dtype;
  if (auto d = dtype_from_torch_name(s)) return d;
  for (const auto& e : kTable) {  // safetensors spellings: F32, BF16, ...
    std::string st = e.safetensors_name;
    std::transform(st.begin(), st.end(), st.begin(), [](unsigned char c) { return std::tolower(c); });
    if (!st.empty() && s == st) return e.dtype;
  }
  return std::nullopt;
}

}  // namespace dcpctl
