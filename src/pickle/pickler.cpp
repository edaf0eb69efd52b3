#include "pickle/pickler.h"

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "pickle/opcodes.h"

namespace dcpctl {

using namespace pickle;

Pickler::Pickler(int protocol) : protocol_(protocol) {
  op(PROTO);
  op(static_cast<uint8_t>(protocol));
}

void Pickler::u32(uint32_t v) {
  for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void Pickler::put_memo() {
  uint32_t idx = next_memo_++;
  if (protocol_ >= 4) {
    op(MEMOIZE);
  } else if (idx < 256) {
    op(BINPUT);
    out_.push_back(static_cast<char>(idx));
  } else {
    op(LONG_BINPUT);
    u32(idx);
  }
}

bool Pickler::get_memo(const std::string& key) {
  auto it = memo_.find(key);
  if (it == memo_.end()) return false;
  if (it->second < 256) {
    op(BINGET);
    out_.push_back(static_cast<char>(it->second));
  } else {
    op(LONG_BINGET);
    u32(it->second);
  }
  return true;
}

void Pickler::none() {
  op(NONE);
}
void Pickler::boolean(bool b) {
  op(b ? NEWTRUE : NEWFALSE);
}

void Pickler::integer(int64_t v) {
  if (v >= 0 && v < 256) {
    op(BININT1);
    out_.push_back(static_cast<char>(v));
  } else if (v >= 0 && v < 65536) {
    op(BININT2);
    out_.push_back(static_cast<char>(v & 0xFF));
    out_.push_back(static_cast<char>(v >> 8));
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    op(BININT);
    u32(static_cast<uint32_t>(static_cast<int32_t>(v)));
  } else {
    // LONG1: minimal little-endian two's complement, as CPython's encode_long.
    uint8_t b[9];
    uint64_t u = static_cast<uint64_t>(v);
    int n = 8;
    for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(u >> (8 * i));
    while (n > 1 && ((b[n - 1] == 0x00 && !(b[n - 2] & 0x80)) || (b[n - 1] == 0xFF && (b[n - 2] & 0x80)))) --n;
    op(LONG1);
    out_.push_back(static_cast<char>(n));
    out_.append(reinterpret_cast<const char*>(b), static_cast<size_t>(n));
  }
}

void Pickler::big_integer(std::string_view le) {
  if (le.size() < 256) {
    op(LONG1);
    out_.push_back(static_cast<char>(le.size()));
  } else {
    op(LONG4);
    u32(static_cast<uint32_t>(le.size()));
  }
  out_.append(le);
}

void Pickler::floating(double d) {
  op(BINFLOAT);
  uint64_t u;
  std::memcpy(&u, &d, 8);
  for (int i = 7; i >= 0; --i) out_.push_back(static_cast<char>((u >> (8 * i)) & 0xFF));
}

void Pickler::str(std::string_view s, bool memo) {
  std::string key;
  if (memo) {
    key = "s:" + std::string(s);
    if (get_memo(key)) return;
  }
  if (protocol_ >= 4 && s.size() < 256) {
    op(SHORT_BINUNICODE);
    out_.push_back(static_cast<char>(s.size()));
  } else {
    op(BINUNICODE);
    u32(static_cast<uint32_t>(s.size()));
  }
  out_.append(s);
  if (memo) {
    memo_[key] = next_memo_;
    put_memo();
  }
}

void Pickler::bytes(std::string_view b) {
  if (protocol_ >= 3) {
    if (b.size() < 256) {
      op(SHORT_BINBYTES);
      out_.push_back(static_cast<char>(b.size()));
    } else {
      op(BINBYTES);
      u32(static_cast<uint32_t>(b.size()));
    }
    out_.append(b);
    return;
  }
  // Protocol 2 has no bytes type: CPython writes _codecs.encode(latin-1 text, 'latin1').
  global("_codecs", "encode");
  std::string text;
  for (unsigned char c : b) {
    if (c < 0x80) {
      text.push_back(static_cast<char>(c));
    } else {
      text.push_back(static_cast<char>(0xC0 | (c >> 6)));
      text.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
  }
  str(text);
  str("latin1", true);
  tuple(2);
  reduce();
}

void Pickler::global(std::string_view module, std::string_view name) {
  std::string key = "g:" + std::string(module) + "\n" + std::string(name);
  if (get_memo(key)) return;
  if (protocol_ >= 4) {
    str(module, true);
    str(name, true);
    op(STACK_GLOBAL);
  } else {
    op(GLOBAL);
    out_.append(module);
    out_.push_back('\n');
    out_.append(name);
    out_.push_back('\n');
  }
  memo_[key] = next_memo_;
  put_memo();
}

void Pickler::mark() {
  op(MARK);
}
void Pickler::tuple_from_mark() {
  op(TUPLE);
}
void Pickler::empty_tuple() {
  op(EMPTY_TUPLE);
}

void Pickler::tuple(size_t n) {
  if (n == 0)
    op(EMPTY_TUPLE);
  else if (n == 1)
    op(TUPLE1);
  else if (n == 2)
    op(TUPLE2);
  else if (n == 3)
    op(TUPLE3);
  else
    throw std::logic_error("Pickler::tuple(n > 3): use mark() + tuple_from_mark()");
}

void Pickler::empty_list() {
  op(EMPTY_LIST);
}
void Pickler::append() {
  op(APPEND);
}
void Pickler::appends() {
  op(APPENDS);
}
void Pickler::empty_dict() {
  op(EMPTY_DICT);
}
void Pickler::setitem() {
  op(SETITEM);
}
void Pickler::setitems() {
  op(SETITEMS);
}
void Pickler::reduce() {
  op(REDUCE);
}
void Pickler::build() {
  op(BUILD);
}
void Pickler::newobj() {
  op(NEWOBJ);
}
void Pickler::binpersid() {
  op(BINPERSID);
}
void Pickler::stop() {
  op(STOP);
}

bool Pickler::value(const Value& v, int depth) {
  if (depth > 200) return false;
  auto seq = [&](const Items& it) {
    for (const Value& e : it)
      if (!value(e, depth + 1)) return false;
    return true;
  };
  switch (v.kind) {
    case Kind::None: none(); return true;
    case Kind::Bool: boolean(v.as_bool()); return true;
    case Kind::Int: integer(v.as_int()); return true;
    case Kind::BigInt: big_integer(v.as_str()); return true;
    case Kind::Float: floating(v.as_float()); return true;
    case Kind::Str: str(v.as_str(), v.len < 64); return true;
    case Kind::Bytes: bytes(v.as_str()); return true;
    case Kind::Tuple: {
      Items it = v.items();
      if (it.size() <= 3) {
        if (!seq(it)) return false;
        tuple(it.size());
      } else {
        mark();
        if (!seq(it)) return false;
        tuple_from_mark();
      }
      return true;
    }
    case Kind::List: {
      empty_list();
      Items it = v.items();
      for (uint64_t i = 0; i < it.size(); i += 1000) {
        mark();
        for (uint64_t j = i; j < it.size() && j < i + 1000; ++j)
          if (!value(it[j], depth + 1)) return false;
        appends();
      }
      return true;
    }
    case Kind::Dict: {
      if (v.flags & pickle::Value::kOrdered) {  // as CPython pickles one: OrderedDict(), then the items
        global("collections", "OrderedDict");
        empty_tuple();
        reduce();
      } else {
        empty_dict();
      }
      Items it = v.items();
      for (uint64_t i = 0; i < it.size(); i += 2000) {
        mark();
        for (uint64_t j = i; j < it.size() && j < i + 2000; ++j)
          if (!value(it[j], depth + 1)) return false;
        setitems();
      }
      return true;
    }
    case Kind::Set: {
      global("builtins", "set");
      empty_list();
      if (!v.items().empty()) {
        mark();
        if (!seq(v.items())) return false;
        appends();
      }
      tuple(1);
      reduce();
      return true;
    }
    case Kind::Size: {
      global("torch", "Size");
      mark();
      if (!seq(v.items())) return false;
      tuple_from_mark();
      tuple(1);
      reduce();
      return true;
    }
    case Kind::Global: global(v.as_global().module, v.as_global().name); return true;
    case Kind::Object: {
      const ObjectNode& o = v.as_object();
      if (!value(o.callable, depth + 1) || !value(o.args, depth + 1)) return false;
      reduce();
      if (!o.state.is_none()) {
        if (!value(o.state, depth + 1)) return false;
        build();
      }
      return true;
    }
    case Kind::PersId:
      if (!persistent_id || !persistent_id(*this, v.as_persid())) return false;
      binpersid();
      return true;
    case Kind::Ext: return false;  // a parser's folded record: no pickle form of its own
  }
  return false;
}

namespace {

void pickle_json_at(Pickler& p, const nlohmann::json& v, int depth) {
  if (depth > 1000) throw std::length_error("JSON nested too deep");
  if (v.is_null()) return p.none();
  if (v.is_boolean()) return p.boolean(v.get<bool>());
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    const uint64_t u = v.get<uint64_t>();
    std::string le;
    for (int i = 0; i < 8; ++i) le.push_back(static_cast<char>((u >> (8 * i)) & 0xFF));
    le.push_back('\0');  // positive: a sign byte
    return p.big_integer(le);
  }
  if (v.is_number_integer()) return p.integer(v.get<int64_t>());
  if (v.is_number()) return p.floating(v.get<double>());
  if (v.is_string()) return p.str(v.get_ref<const std::string&>());
  if (v.is_array()) {
    p.empty_list();
    if (v.empty()) return;
    p.mark();
    for (const auto& e : v) pickle_json_at(p, e, depth + 1);
    return p.appends();
  }
  p.empty_dict();
  if (v.empty()) return;
  p.mark();
  for (const auto& [k, e] : v.items()) {
    p.str(k, true);
    pickle_json_at(p, e, depth + 1);
  }
  p.setitems();
}

}  // namespace

void pickle_json(Pickler& p, const nlohmann::json& v) {
  pickle_json_at(p, v, 0);
}

}  // namespace dcpctl
