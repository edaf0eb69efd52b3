#include "item/raw_values.h"

#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "pickle/pickler.h"
#include "pickle/vm.h"
#include "util/error.h"

namespace dcpctl::raw {

bool json_file(const std::string& path) {
  return path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
}

namespace {

// Python's json.loads reads NaN, Infinity and -Infinity (json.dumps writes them for such floats),
// which JSON has not: outside strings each becomes a sentinel string, turned back into the float
// once parsed. nullopt when the text has none of them.
constexpr const char* kPyFloat = "\\u0001dcpctl-py-float:";  // as written in the text (an escape)
constexpr const char* kPyFloatParsed =
    "\x01"
    "dcpctl-py-float:";  // as parsed

std::optional<std::pair<std::string, size_t>> python_floats_as_strings(const std::string& t) {
  std::string out;
  size_t n = 0;
  bool in_str = false;
  for (size_t i = 0; i < t.size(); ++i) {
    const char c = t[i];
    if (in_str) {
      out.push_back(c);
      if (c == '\\' && i + 1 < t.size())
        out.push_back(t[++i]);
      else if (c == '"')
        in_str = false;
      continue;
    }
    const char* token = t.compare(i, 3, "NaN") == 0         ? "NaN"
                        : t.compare(i, 8, "Infinity") == 0  ? "Infinity"
                        : t.compare(i, 9, "-Infinity") == 0 ? "-Infinity"
                                                            : nullptr;
    if (token) {
      out += std::string("\"") + kPyFloat + token + "\"";
      i += std::char_traits<char>::length(token) - 1;
      ++n;
      continue;
    }
    if (c == '"') in_str = true;
    out.push_back(c);
  }
  if (n == 0) return std::nullopt;
  return std::make_pair(std::move(out), n);
}

// The sentinels back into floats; how many were found (a string of the input that spells one
// too makes the count differ).
size_t restore_python_floats(nlohmann::json& v, int depth) {
  if (depth > 1000) throw std::length_error("JSON nested too deep");
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    const std::string prefix = kPyFloatParsed;
    if (s.compare(0, prefix.size(), prefix) != 0) return 0;
    const std::string token = s.substr(prefix.size());
    const double inf = std::numeric_limits<double>::infinity();
    v = token == "NaN" ? std::numeric_limits<double>::quiet_NaN() : token == "Infinity" ? inf : -inf;
    return 1;
  }
  size_t n = 0;
  if (v.is_array() || v.is_object())
    for (auto& e : v) n += restore_python_floats(e, depth + 1);
  return n;
}

}  // namespace

std::unique_ptr<pickle::Tree> value_tree(const std::string& bytes, bool json, const Where& where) {
  Pickler p(2);
  if (json) {
    nlohmann::json j;
    try {
      try {
        j = nlohmann::json::parse(bytes);
      } catch (const nlohmann::json::parse_error&) {
        auto py = python_floats_as_strings(bytes);
        if (!py) throw;
        j = nlohmann::json::parse(py->first);
        if (restore_python_floats(j, 0) != py->second)
          throw UnsupportedError(
              where,
              "torch_checkpointing: a JSON item holding NaN or Infinity and a string that spells dcpctl's "
              "stand-in for them");
      }
      pickle_json(p, j);
    } catch (const nlohmann::json::parse_error& e) {
      if (bytes.find("\\ud") != std::string::npos || bytes.find("\\uD") != std::string::npos)
        throw UnsupportedError(where, std::string("torch_checkpointing: a JSON item dcpctl does not parse (") +
                                          e.what() + "); Python's json may read it (a lone surrogate escape)");
      throw FormatError(where, std::string("a JSON item (JsonSerialization) that does not parse: ") + e.what());
    } catch (const std::length_error&) {
      throw FormatError(where, "a JSON item nested deeper than Python's json reads (1000 levels)");
    }
  } else {
    p.bytes(bytes);
  }
  p.stop();
  pickle::ParseOptions po;
  po.source = where.file;
  return pickle::parse(ByteSpan(reinterpret_cast<const uint8_t*>(p.data().data()), p.data().size()), po);
}

}  // namespace dcpctl::raw
