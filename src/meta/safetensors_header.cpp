#include "meta/safetensors_header.h"

#include <nlohmann/json.hpp>

#include <set>

namespace dcpctl {

using nlohmann::json;

const SafetensorsTensorInfo* SafetensorsHeader::find(const std::string& key) const {
  for (const auto& e : tensors)
    if (e.key == key) return &e;
  return nullptr;
}

std::optional<DType> dtype_from_safetensors_name(const std::string& name) {
  for (int d = 0; d <= static_cast<int>(DType::Float4_E2M1FN_X2); ++d) {
    const DTypeInfo& i = info(static_cast<DType>(d));
    if (*i.safetensors_name && name == i.safetensors_name) return i.dtype;
  }
  return std::nullopt;
}

namespace {

// One SAX handler for the reader and the audit, building the entries directly so a hostile header
// never becomes a DOM of ten times its size: depth is at most 3 (root -> entry -> shape array)
// and every value has one expected kind. Strict (the reader): a key written twice is the error;
// lenient (the audit): it is recorded and parsing goes on, so every problem can be reported.
class HeaderSax : public nlohmann::json_sax<json> {
 public:
  HeaderSax(SafetensorsEntries& out, bool lenient) : out_(out), lenient_(lenient) {}

  bool null() override { return fail("null value"); }
  bool boolean(bool) override { return fail("boolean value"); }
  bool number_integer(number_integer_t v) override {
    if (v < 0) return fail("negative number");
    return number_unsigned(static_cast<number_unsigned_t>(v));
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (state_ == State::Shape) {
      if (v > static_cast<uint64_t>(INT64_MAX)) return fail("dimension too large");
      entry_.shape.push_back(static_cast<int64_t>(v));
      return true;
    }
    if (state_ == State::Offsets) {
      if (offsets_seen_ >= 2) return fail("data_offsets holds more than two numbers");
      (offsets_seen_++ == 0 ? entry_.begin : entry_.end) = v;
      return true;
    }
    if (state_ == State::Entry) return true;  // an unknown scalar field: tolerated
    return fail("unexpected number");
  }
  bool number_float(number_float_t, const string_t&) override { return fail("unexpected fractional number"); }
  bool string(string_t& s) override {
    if (state_ == State::Meta) {
      out_.metadata[meta_key_] = s;
      return true;
    }
    if (state_ == State::Entry) {
      if (field_ == "dtype") {
        if (have_dtype_) return fail("tensor '" + entry_.key + "' has two dtypes");
        entry_.dtype_name = s;
        have_dtype_ = true;
      }
      return true;  // unknown string fields are tolerated
    }
    return fail("unexpected string");
  }
  bool binary(binary_t&) override { return fail("binary value"); }
  bool start_object(std::size_t) override {
    if (state_ == State::Start) return (state_ = State::Root), true;
    if (state_ == State::Root) {
      if (!keys_.insert(key_).second) {
        if (!lenient_) return fail("key '" + key_ + "' appears twice");
        out_.duplicates.push_back(key_);
      }
      if (key_ == "__metadata__") return (state_ = State::Meta), true;
      entry_ = SafetensorsTensorInfo();
      entry_.key = key_;
      have_dtype_ = have_shape_ = false;
      offsets_seen_ = 0;
      return (state_ = State::Entry), true;
    }
    return fail("unexpected object");
  }
  bool key(string_t& k) override {
    if (state_ == State::Root)
      key_ = k;
    else if (state_ == State::Meta)
      meta_key_ = k;
    else if (state_ == State::Entry)
      field_ = k;
    return true;
  }
  bool end_object() override {
    if (state_ == State::Meta) return (state_ = State::Root), true;
    if (state_ == State::Entry) {
      if (!have_dtype_ || !have_shape_ || offsets_seen_ != 2)
        return fail("tensor '" + entry_.key + "' lacks dtype, shape or data_offsets");
      out_.tensors.push_back(std::move(entry_));
      return (state_ = State::Root), true;
    }
    if (state_ == State::Root) return (state_ = State::Done), true;
    return fail("unexpected end of object");
  }
  bool start_array(std::size_t) override {
    if (state_ == State::Entry && field_ == "shape") {
      if (have_shape_) return fail("tensor '" + entry_.key + "' has two shapes");
      have_shape_ = true;
      return (state_ = State::Shape), true;
    }
    if (state_ == State::Entry && field_ == "data_offsets") {
      if (offsets_seen_) return fail("tensor '" + entry_.key + "' has two data_offsets");
      return (state_ = State::Offsets), true;
    }
    return fail("unexpected array");
  }
  bool end_array() override {
    if (state_ == State::Shape || state_ == State::Offsets) return (state_ = State::Entry), true;
    return fail("unexpected end of array");
  }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& ex) override {
    out_.error = "JSON error near header byte " + std::to_string(pos) + ": " + ex.what();
    return false;
  }

 private:
  enum class State { Start, Root, Meta, Entry, Shape, Offsets, Done };
  bool fail(const std::string& what) {
    if (out_.error.empty()) out_.error = what + (key_.empty() ? "" : " (at key '" + key_ + "')");
    return false;
  }
  SafetensorsEntries& out_;
  const bool lenient_;
  State state_ = State::Start;
  std::string key_, meta_key_, field_;
  std::set<std::string> keys_;
  SafetensorsTensorInfo entry_;
  bool have_dtype_ = false, have_shape_ = false;
  int offsets_seen_ = 0;
};

// Parses and checks the JSON text; `data_bytes` is what follows the header in the input.
SafetensorsHeader parse_json(std::string_view text, uint64_t base, uint64_t data_bytes, const std::string& source) {
  SafetensorsHeader h;
  h.header_bytes = text.size();
  h.data_start = base + 8 + text.size();
  h.data_bytes = data_bytes;
  SafetensorsEntries entries = decode_safetensors_json(text, false);
  if (!entries.error.empty()) throw FormatError(Where(source, base + 8), "safetensors header: " + entries.error);
  h.tensors = std::move(entries.tensors);
  h.metadata = std::move(entries.metadata);
  for (auto& e : h.tensors) {
    Where w(source, h.data_start + e.begin, e.key);
    if (e.begin > e.end || e.end > data_bytes)
      throw FormatError(w, "safetensors data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                               ") run outside the data section (" + std::to_string(data_bytes) + " bytes)");
    uint64_t numel = 1;
    for (int64_t d : e.shape) {
      if (d != 0 && numel > UINT64_MAX / static_cast<uint64_t>(d)) throw FormatError(w, "safetensors shape overflows");
      numel *= static_cast<uint64_t>(d);
    }
    auto dt = dtype_from_safetensors_name(e.dtype_name);
    if (dt == DType::Float4_E2M1FN_X2) {
      // F4 counts 4-bit elements; torch's float4_e2m1fn_x2 counts the bytes that pack two, so
      // its last dimension is half the file's (as safetensors' own torch loader reads it).
      if (e.shape.empty() || e.shape.back() % 2)
        throw FormatError(
            w, std::string("safetensors F4 entry ") +
                   (e.shape.empty() ? "of no dimension" : "whose last dimension is " + std::to_string(e.shape.back())) +
                   ": it must be even (two 4-bit values a byte)");
      if (numel / 2 != e.end - e.begin)
        throw FormatError(w, "safetensors entry holds " + std::to_string(e.end - e.begin) +
                                 " bytes but F4 of its shape needs " + std::to_string(numel / 2));
      e.shape.back() /= 2;
    } else if (dt) {
      uint64_t item = itemsize(*dt);
      if (numel > UINT64_MAX / item || numel * item != e.end - e.begin)
        throw FormatError(w, "safetensors entry holds " + std::to_string(e.end - e.begin) + " bytes but " +
                                 e.dtype_name + " of its shape needs " +
                                 (numel > UINT64_MAX / item ? std::string("more") : std::to_string(numel * item)));
    }
  }
  for (auto& e : h.tensors) e.dtype = dtype_from_safetensors_name(e.dtype_name);
  return h;
}

uint64_t header_length(const uint8_t* p) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | p[i];
  return n;
}

}  // namespace

SafetensorsEntries decode_safetensors_json(std::string_view text, bool lenient) {
  SafetensorsEntries out;
  HeaderSax sax(out, lenient);
  bool ok = json::sax_parse(text.begin(), text.end(), &sax, nlohmann::detail::input_format_t::json, true);
  if (!ok && out.error.empty()) out.error = "not a JSON object";
  if (!out.error.empty()) out.tensors.clear(), out.metadata.clear(), out.duplicates.clear();
  return out;
}

std::string read_safetensors_header_text(const ReadFile& file, uint64_t base, uint64_t& limit) {
  Where where(file.path(), base);
  if (base > file.size() || limit > file.size() - base) limit = base > file.size() ? 0 : file.size() - base;
  if (limit < 8)
    throw FormatError(where, "safetensors header: " + std::to_string(limit) + " bytes, too short for its length field");
  uint8_t len[8];
  file.read_at(base, len, 8);
  uint64_t n = header_length(len);
  if (n > kMaxSafetensorsHeader)
    throw FormatError(where, "safetensors header claims " + std::to_string(n) + " bytes (the format's cap is 100 MB)");
  if (n > limit - 8)
    throw FormatError(where, "safetensors header of " + std::to_string(n) + " bytes runs past the end (" +
                                 std::to_string(limit - 8) + " bytes follow)");
  std::string text(static_cast<size_t>(n), '\0');
  file.read_at(base + 8, text.data(), text.size());
  return text;
}

SafetensorsHeader read_safetensors_header(const ReadFile& file, uint64_t base, uint64_t limit) {
  std::string text = read_safetensors_header_text(file, base, limit);
  return parse_json(text, base, limit - 8 - text.size(), file.path());
}

SafetensorsHeader parse_safetensors_header(ByteSpan bytes, const std::string& source) {
  if (bytes.size < 8) throw FormatError(Where(source, 0), "safetensors header: too short for its length field");
  uint64_t n = header_length(bytes.data);
  if (n > kMaxSafetensorsHeader || n > bytes.size - 8)
    throw FormatError(Where(source, 0), "safetensors header of " + std::to_string(n) + " bytes runs past the end");
  return parse_json(std::string_view(reinterpret_cast<const char*>(bytes.data) + 8, n), 0, bytes.size - 8 - n, source);
}

std::map<std::string, std::vector<int64_t>> dcp_sharding_info(const SafetensorsHeader& h, const std::string& source) {
  std::map<std::string, std::vector<int64_t>> out;
  auto it = h.metadata.find("DCP_SHARDING_INFO");
  if (it == h.metadata.end()) return out;
  Where where(source, 8, "DCP_SHARDING_INFO");
  json j = json::parse(it->second, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw FormatError(where, "not a JSON object");
  for (const auto& [key, v] : j.items()) {
    const json* offs = v.is_object() && v.contains("saved_offsets") ? &v["saved_offsets"] : nullptr;
    if (!offs || !offs->is_array())
      throw FormatError(Where(source, 8, key), "DCP_SHARDING_INFO entry lacks saved_offsets");
    std::vector<int64_t> o;
    for (const auto& x : *offs) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0)
        throw FormatError(Where(source, 8, key), "DCP_SHARDING_INFO saved_offsets holds a non-index");
      o.push_back(x.get<int64_t>());
    }
    out[key] = std::move(o);
  }
  return out;
}

}  // namespace dcpctl
