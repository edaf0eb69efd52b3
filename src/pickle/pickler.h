// A pickle writer: the opcodes CPython's own pickler emits, so what we write reads back with
// pickle.load and with torch.load(weights_only=True) (whose unpickler accepts a subset).
//
// Protocol 2 is what torch.save uses for data.pkl; protocol 4 is what `.metadata` uses. Strings
// and globals can be memoized (BINPUT/LONG_BINPUT under protocol 2, MEMOIZE under 4) so repeated
// keys cost a BINGET; everything else is written once. No FRAME opcodes are written: framing is
// optional for readers.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "pickle/value.h"

namespace dcpctl {

class Pickler {
 public:
  explicit Pickler(int protocol = 2);

  void none();
  void boolean(bool b);
  void integer(int64_t v);
  void big_integer(std::string_view le_twos_complement);
  void floating(double d);
  void str(std::string_view s, bool memo = false);
  void bytes(std::string_view b);
  void global(std::string_view module, std::string_view name);  // always memoized
  void mark();
  void tuple_from_mark();
  void tuple(size_t n);  // the last n items (n <= 3 uses TUPLE1..3)
  void empty_tuple();
  void empty_list();
  void append();
  void appends();  // items since mark
  void empty_dict();
  void setitem();
  void setitems();  // pairs since mark
  void reduce();
  void build();
  void newobj();
  void binpersid();
  void stop();

  // Re-emits a value decoded by the restricted VM (strings memoized). A persistent id (a tensor's
  // storage) is re-emitted by `persistent_id`, which pushes what stands for the pid and returns
  // true; without it, or when it returns false, value() returns false.
  bool value(const pickle::Value& v, int depth = 0);
  std::function<bool(Pickler&, const pickle::Value& pid)> persistent_id;

  const std::string& data() const { return out_; }
  std::string take() { return std::move(out_); }

 private:
  void op(uint8_t o) { out_.push_back(static_cast<char>(o)); }
  void u32(uint32_t v);
  void put_memo();
  bool get_memo(const std::string& key);

  int protocol_;
  std::string out_;
  std::unordered_map<std::string, uint32_t> memo_;
  uint32_t next_memo_ = 0;
};

// A JSON value pickled as the Python value json.load gives: None, bool, int (past int64 too, up
// to uint64: a long, as Python's int), float, str, list, dict (keys memoized).
// std::length_error past 1000 levels of nesting, where Python's json stops (its recursion limit).
void pickle_json(Pickler& p, const nlohmann::json& v);

}  // namespace dcpctl
