#include "meta/safetensors_audit.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <set>

#include "meta/safetensors_header.h"
#include "store/file.h"

namespace dcpctl {

using nlohmann::json;

unsigned safetensors_dtype_bits(const std::string& name) {
  static const std::map<std::string, unsigned> kBits = {
      {"BOOL", 8}, {"U8", 8},   {"I8", 8},    {"F8_E5M2", 8}, {"F8_E4M3", 8}, {"F8_E8M0", 8}, {"I16", 16},
      {"U16", 16}, {"F16", 16}, {"BF16", 16}, {"I32", 32},    {"U32", 32},    {"F32", 32},    {"I64", 64},
      {"U64", 64}, {"F64", 64}, {"C64", 64},  {"F4", 4},      {"F6_E2M3", 6}, {"F6_E3M2", 6},
  };
  auto it = kBits.find(name);
  return it == kBits.end() ? 0 : it->second;
}

namespace safetensors_audit_impl {

// Records the entries as written, duplicates included; stops (header-invalid) only on what is
// not the format's shape at all. Depth is at most 3, as in the reader's handler.
class AuditSax : public nlohmann::json_sax<json> {
 public:
  explicit AuditSax(SafetensorsAudit& a) : a_(a) {}
  std::string error;
  std::vector<std::string> duplicates;

  bool null() override { return fail("null value"); }
  bool boolean(bool) override { return fail("boolean value"); }
  bool number_integer(number_integer_t v) override {
    if (v < 0) return fail("negative number");
    return number_unsigned(static_cast<number_unsigned_t>(v));
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (state_ == State::Shape) {
      if (v > static_cast<uint64_t>(INT64_MAX)) return fail("dimension too large");
      t_.shape.push_back(static_cast<int64_t>(v));
      return true;
    }
    if (state_ == State::Offsets) {
      if (offsets_ >= 2) return fail("data_offsets holds more than two numbers");
      (offsets_++ == 0 ? t_.begin : t_.end) = v;
      return true;
    }
    if (state_ == State::Entry) return true;
    return fail("unexpected number");
  }
  bool number_float(number_float_t, const string_t&) override { return fail("unexpected fractional number"); }
  bool string(string_t& s) override {
    if (state_ == State::Meta) return true;
    if (state_ == State::Entry) {
      if (field_ == "dtype") {
        if (dtype_) return fail("tensor '" + t_.key + "' has two dtypes");
        t_.dtype_name = s, dtype_ = true;
      }
      return true;
    }
    return fail("unexpected string");
  }
  bool binary(binary_t&) override { return fail("binary value"); }
  bool start_object(std::size_t) override {
    if (state_ == State::Start) return (state_ = State::Root), true;
    if (state_ == State::Root) {
      if (!keys_.insert(key_).second) duplicates.push_back(key_);
      if (key_ == "__metadata__") return (state_ = State::Meta), true;
      t_ = AuditedTensor();
      t_.key = key_;
      dtype_ = shape_ = false;
      offsets_ = 0;
      return (state_ = State::Entry), true;
    }
    return fail("unexpected object");
  }
  bool key(string_t& k) override {
    if (state_ == State::Root)
      key_ = k;
    else if (state_ == State::Entry)
      field_ = k;
    return true;
  }
  bool end_object() override {
    if (state_ == State::Meta) return (state_ = State::Root), true;
    if (state_ == State::Entry) {
      if (!dtype_ || !shape_ || offsets_ != 2)
        return fail("tensor '" + t_.key + "' lacks dtype, shape or data_offsets");
      a_.tensors.push_back(std::move(t_));
      return (state_ = State::Root), true;
    }
    if (state_ == State::Root) return (state_ = State::Done), true;
    return fail("unexpected end of object");
  }
  bool start_array(std::size_t) override {
    if (state_ == State::Entry && field_ == "shape") {
      if (shape_) return fail("tensor '" + t_.key + "' has two shapes");
      shape_ = true;
      return (state_ = State::Shape), true;
    }
    if (state_ == State::Entry && field_ == "data_offsets") {
      if (offsets_) return fail("tensor '" + t_.key + "' has two data_offsets");
      return (state_ = State::Offsets), true;
    }
    return fail("unexpected array");
  }
  bool end_array() override {
    if (state_ == State::Shape || state_ == State::Offsets) return (state_ = State::Entry), true;
    return fail("unexpected end of array");
  }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& ex) override {
    error = "JSON error near header byte " + std::to_string(pos) + ": " + ex.what();
    return false;
  }

 private:
  enum class State { Start, Root, Meta, Entry, Shape, Offsets, Done };
  bool fail(const std::string& what) {
    if (error.empty()) error = what + (key_.empty() ? "" : " (at key '" + key_ + "')");
    return false;
  }
  SafetensorsAudit& a_;
  State state_ = State::Start;
  std::string key_, field_;
  std::set<std::string> keys_;
  AuditedTensor t_;
  bool dtype_ = false, shape_ = false;
  int offsets_ = 0;
};

// Bytes of `t` by dtype x shape; nullopt when the dtype is unknown, the count overflows, or the
// bits are not whole bytes (`why` says which).
std::optional<uint64_t> expected_bytes(const AuditedTensor& t, std::string& why) {
  const unsigned bits = safetensors_dtype_bits(t.dtype_name);
  if (!bits) return std::nullopt;
  uint64_t numel = 1;
  for (int64_t d : t.shape) {
    if (d != 0 && numel > UINT64_MAX / static_cast<uint64_t>(d)) return why = "its shape overflows", std::nullopt;
    numel *= static_cast<uint64_t>(d);
  }
  if (numel > UINT64_MAX / bits) return why = "its shape overflows", std::nullopt;
  if (numel * bits % 8)
    return why = std::to_string(numel) + " elements of " + t.dtype_name + " are not whole bytes", std::nullopt;
  return numel * bits / 8;
}

}  // namespace safetensors_audit_impl

using namespace safetensors_audit_impl;

SafetensorsAudit audit_safetensors_header(std::string_view text, uint64_t data_start, uint64_t data_bytes,
                                          const std::string& source) {
  SafetensorsAudit a;
  a.header_bytes = text.size();
  a.data_start = data_start;
  a.data_bytes = data_bytes;
  AuditSax sax(a);
  bool ok = json::sax_parse(text.begin(), text.end(), &sax, nlohmann::detail::input_format_t::json, true);
  const uint64_t header_at = data_start - text.size();
  if (!ok || !sax.error.empty()) {
    a.tensors.clear();
    a.problems.push_back({"header-invalid", Where(source, header_at),
                          "safetensors header: " + (sax.error.empty() ? std::string("not a JSON object") : sax.error)});
    return a;
  }
  a.decoded = true;
  for (const auto& k : sax.duplicates)
    a.problems.push_back(
        {"duplicate-key", Where(source, header_at, k),
         "the header names this key more than once: a JSON reader keeps one entry and the other tensor is lost"});
  struct Span {
    uint64_t begin, end;
    const std::string* key;
  };
  std::vector<Span> spans;
  for (const auto& t : a.tensors) {
    Where w(source, data_start + t.begin, t.key);
    if (t.begin > t.end || t.end > data_bytes) {
      a.problems.push_back({"window-out-of-file", w,
                            "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                                ") run outside the data section (" + std::to_string(data_bytes) + " bytes)"});
      continue;
    }
    std::string why;
    std::optional<uint64_t> want = expected_bytes(t, why);
    if (!why.empty())
      a.problems.push_back({"size-mismatch", w, why});
    else if (want && *want != t.end - t.begin)
      a.problems.push_back({"size-mismatch", w,
                            "data_offsets span " + std::to_string(t.end - t.begin) + " bytes but " + t.dtype_name +
                                " of its shape needs " + std::to_string(*want)});
    spans.push_back({t.begin, t.end, &t.key});
  }
  std::stable_sort(spans.begin(), spans.end(), [](const Span& x, const Span& y) { return x.begin < y.begin; });
  uint64_t covered = 0;  // the data section's bytes [0, covered) are some tensor's or reported
  const Span* reach = nullptr;
  for (const Span& s : spans) {
    if (s.end == s.begin) continue;  // an empty tensor occupies no byte
    Where w(source, data_start + s.begin, *s.key);
    if (reach && s.begin < reach->end)
      a.problems.push_back(
          {"window-overlap", w,
           "its bytes overlap those of '" + *reach->key + "' at data offset " + std::to_string(reach->begin)});
    else if (s.begin > covered)
      a.problems.push_back(
          {"offsets-gap", w,
           std::to_string(s.begin - covered) + " bytes of the data section before it belong to no tensor"});
    if (!reach || s.end > reach->end) reach = &s;
    covered = std::max(covered, s.end);
  }
  if (covered < data_bytes && spans.size() == a.tensors.size())
    a.problems.push_back({"offsets-gap", Where(source, data_start + covered),
                          std::to_string(data_bytes - covered) + " bytes after the last tensor belong to no tensor"});
  return a;
}

SafetensorsAudit audit_safetensors_file(const std::string& path) {
  ReadFile f(path);
  auto invalid = [&](const std::string& msg) {
    SafetensorsAudit a;
    a.problems.push_back({"header-invalid", Where(path, 0), msg});
    return a;
  };
  if (f.size() < 8)
    return invalid("safetensors header: " + std::to_string(f.size()) + " bytes, too short for its length field");
  uint8_t len[8];
  f.read_at(0, len, 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  if (n > kMaxSafetensorsHeader)
    return invalid("safetensors header claims " + std::to_string(n) + " bytes (the format's cap is 100 MB)");
  if (n > f.size() - 8)
    return invalid("safetensors header of " + std::to_string(n) + " bytes runs past the end (" +
                   std::to_string(f.size() - 8) + " bytes follow)");
  std::string text(static_cast<size_t>(n), '\0');
  f.read_at(8, text.data(), text.size());
  return audit_safetensors_header(text, 8 + n, f.size() - 8 - n, path);
}

}  // namespace dcpctl
