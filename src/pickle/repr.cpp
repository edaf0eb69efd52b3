#include "pickle/repr.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace dcpctl::pickle {
namespace {

constexpr int kMaxDepth = 64;
// The memo lets a small pickle reference one object many times ((x, x) nested 60 deep names 2^60
// leaves); repr is bounded by its output size, JSON by the number of values it visits.
constexpr uint64_t kMaxJsonValues = uint64_t{1} << 22;

class Printer {
 public:
  explicit Printer(size_t max) : max_(max) {}
  // True once the output is full; asking means there is more to print, so the cut is marked.
  bool full() {
    if (out_.size() >= max_) cut_ = true;
    return cut_;
  }
  void put(std::string_view s) {
    if (s.empty() || full()) return;
    size_t room = max_ - out_.size();
    if (s.size() > room) cut_ = true;
    out_.append(s.substr(0, room));
  }

  void str_lit(std::string_view s, bool bytes) {
    put(bytes ? "b'" : "'");
    for (unsigned char c : s) {
      if (full()) return;
      if (c == '\'' || c == '\\') {
        out_ += '\\';
        out_ += static_cast<char>(c);
      } else if (c == '\n') {
        out_ += "\\n";
      } else if (c < 0x20 || c == 0x7f || (bytes && c >= 0x80)) {
        char b[8];
        std::snprintf(b, sizeof b, "\\x%02x", c);
        out_ += b;
      } else {
        out_ += static_cast<char>(c);
      }
    }
    put("'");
  }

  void seq(const Value& v, const char* open, const char* close, int depth, bool dict = false, bool call = false) {
    put(open);
    Items it = v.items();
    for (uint64_t i = 0; i < it.size() && !full(); ++i) {
      if (i) put(dict && i % 2 ? ": " : ", ");
      value(it[i], depth + 1);
    }
    if (v.kind == Kind::Tuple && it.size() == 1 && !call) put(",");
    put(close);
  }

  void value(const Value& v, int depth) {
    if (full()) return;
    if (depth > kMaxDepth) return put("...");
    switch (v.kind) {
      case Kind::None: return put("None");
      case Kind::Bool: return put(v.as_bool() ? "True" : "False");
      case Kind::Int: return put(std::to_string(v.as_int()));
      case Kind::BigInt: return put("<int of " + std::to_string(v.len * 8) + " bits>");
      case Kind::Float: {
        double d = v.as_float();
        if (std::isnan(d)) return put("nan");
        if (std::isinf(d)) return put(d > 0 ? "inf" : "-inf");
        char b[32];
        std::snprintf(b, sizeof b, "%.17g", d);
        // Shortest form that round-trips, as Python prints.
        for (int p = 1; p <= 17; ++p) {
          char t[32];
          std::snprintf(t, sizeof t, "%.*g", p, d);
          if (std::strtod(t, nullptr) == d) {
            std::snprintf(b, sizeof b, "%s", t);
            break;
          }
        }
        std::string s = b;
        if (s.find_first_of(".en") == std::string::npos) s += ".0";
        return put(s);
      }
      case Kind::Str: return str_lit(v.as_str(), false);
      case Kind::Bytes: return str_lit(v.as_str(), true);
      case Kind::Tuple: return seq(v, "(", ")", depth);
      case Kind::List: return seq(v, "[", "]", depth);
      case Kind::Set: return seq(v, "{", "}", depth);
      case Kind::Dict: return seq(v, "{", "}", depth, true);
      case Kind::Size: return seq(v, "torch.Size([", "])", depth);
      case Kind::Global: {
        const GlobalRef& g = v.as_global();
        put(g.module);
        put(".");
        return put(g.name);
      }
      case Kind::Object: {
        const ObjectNode& o = v.as_object();
        value(o.callable, depth + 1);
        if (o.args.kind == Kind::Tuple)
          seq(o.args, "(", ")", depth, false, true);
        else
          put("(...)");
        if (o.state.kind != Kind::None) {
          put(" state=");
          value(o.state, depth + 1);
        }
        return;
      }
      case Kind::PersId:
        put("persistent_id(");
        value(v.as_persid(), depth + 1);
        return put(")");
      case Kind::Ext: return put("<record>");
    }
  }

  std::string take() {
    if (out_.size() > max_) {
      out_.resize(max_);
      cut_ = true;
    }
    if (cut_) out_ += "...";
    return std::move(out_);
  }

 private:
  size_t max_;
  std::string out_;
  bool cut_ = false;
};

bool json_value(const Value& v, nlohmann::json& out, int depth, uint64_t& budget) {
  if (depth > kMaxDepth || budget == 0) return false;
  --budget;
  switch (v.kind) {
    case Kind::None: out = nullptr; return true;
    case Kind::Bool: out = v.as_bool(); return true;
    case Kind::Int: out = v.as_int(); return true;
    case Kind::Float:
      if (!std::isfinite(v.as_float())) return false;
      out = v.as_float();
      return true;
    case Kind::Str: out = std::string(v.as_str()); return true;
    case Kind::Tuple:
    case Kind::List:
    case Kind::Size: {
      out = nlohmann::json::array();
      for (const Value& e : v.items()) {
        nlohmann::json j;
        if (!json_value(e, j, depth + 1, budget)) return false;
        out.push_back(std::move(j));
      }
      return true;
    }
    case Kind::Dict: {
      out = nlohmann::json::object();
      Items it = v.items();
      for (uint64_t i = 0; i + 1 < it.size(); i += 2) {
        if (it[i].kind != Kind::Str) return false;
        nlohmann::json j;
        if (!json_value(it[i + 1], j, depth + 1, budget)) return false;
        out[std::string(it[i].as_str())] = std::move(j);
      }
      return true;
    }
    default: return false;
  }
}

}  // namespace

std::string repr(const Value& v, size_t max_chars) {
  Printer p(max_chars);
  p.value(v, 0);
  return p.take();
}

bool to_json(const Value& v, nlohmann::json& out) {
  uint64_t budget = kMaxJsonValues;
  return json_value(v, out, 0, budget);
}

}  // namespace dcpctl::pickle
