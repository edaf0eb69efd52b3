#include "pickle/vm.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "pickle/opcodes.h"

namespace dcpctl::pickle {
namespace {

// One decoded opcode argument. Views point into the input span.
struct Arg {
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  std::string_view s, s2;
  bool is_bool = false;  // protocol-0 INT spelled 00/01
  bool is_big = false;   // LONG1/LONG4 that does not fit int64: s holds the bytes
};

// Python's int(line) for INT/LONG text opcodes, restricted to int64.
int64_t parse_text_int(SpanReader& r, size_t op_pos, std::string_view s, const char* what) {
  if (!s.empty() && s.back() == 'L') s.remove_suffix(1);
  std::string tmp(s);
  if (tmp.empty()) r.fail_at(op_pos, std::string(what) + " with an empty number");
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(tmp.c_str(), &end, 10);
  if (end != tmp.c_str() + tmp.size())
    r.fail_at(op_pos, std::string(what) + " with a malformed number '" + tmp.substr(0, 40) + "'");
  if (errno == ERANGE) throw UnsupportedError(Where(r.source(), r.abs_pos()), std::string(what) + " beyond 64 bits");
  return v;
}

std::string latin1_to_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back(static_cast<char>(0xC0 | (c >> 6)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Inverse of latin1_to_utf8; false if a code point is above U+00FF or the UTF-8 is malformed.
bool utf8_to_latin1(std::string_view s, std::string& out) {
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else if ((c == 0xC2 || c == 0xC3) && i + 1 < s.size() && (static_cast<unsigned char>(s[i + 1]) & 0xC0) == 0x80) {
      out.push_back(static_cast<char>(((c & 0x03) << 6) | (static_cast<unsigned char>(s[++i]) & 0x3F)));
    } else {
      return false;
    }
  }
  return true;
}

// What CPython's unpickler accepts for str: UTF-8 (RFC 3629), plus UTF-16 surrogates encoded as
// three bytes (BINUNICODE decodes with 'surrogatepass'). Surrogates cannot be carried in the
// strict UTF-8 that JSON and terminals need, so they are reported separately.
enum class Utf8 { ok, invalid, surrogate };
Utf8 check_utf8(std::string_view s) {
  Utf8 result = Utf8::ok;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size(), i = 0;
  // Names, keys and file names are ASCII: eight bytes at a time while no high bit is set.
  for (uint64_t w; i + 8 <= n; i += 8) {
    std::memcpy(&w, p + i, 8);
    if (w & 0x8080808080808080ull) break;
  }
  while (i < n) {
    unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (len == 0 || len > n - i) return Utf8::invalid;
    for (size_t k = 1; k < len; ++k)
      if ((p[i + k] & 0xC0) != 0x80) return Utf8::invalid;
    if (c == 0xE0 && p[i + 1] < 0xA0) return Utf8::invalid;       // overlong
    if (c == 0xF0 && p[i + 1] < 0x90) return Utf8::invalid;       // overlong
    if (c == 0xF4 && p[i + 1] > 0x8F) return Utf8::invalid;       // > U+10FFFF
    if (c == 0xED && p[i + 1] >= 0xA0) result = Utf8::surrogate;  // U+D800..DFFF
    i += len;
  }
  return result;
}

// Bits set in x (SWAR; __builtin_popcountll is a libgcc call without -mpopcnt).
inline uint64_t popcount64(uint64_t x) {
  x = x - ((x >> 1) & 0x5555555555555555ull);
  x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
  x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
  return (x * 0x0101010101010101ull) >> 56;
}

int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// UNICODE ('V'): raw-unicode-escape, i.e. latin-1 with \uXXXX and \UXXXXXXXX escapes.
bool decode_raw_unicode_escape(std::string_view s, std::string& out) {
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\\' && i + 1 < s.size() && (s[i + 1] == 'u' || s[i + 1] == 'U')) {
      size_t n = s[i + 1] == 'u' ? 4 : 8;
      if (i + 2 + n > s.size()) return false;
      uint32_t cp = 0;
      for (size_t k = 0; k < n; ++k) {
        int h = hexval(s[i + 2 + k]);
        if (h < 0) return false;
        cp = cp * 16 + static_cast<uint32_t>(h);
      }
      if (cp > 0x10FFFF) return false;
      append_utf8(out, cp);
      i += 1 + n;
    } else {
      append_utf8(out, c);
    }
  }
  return true;
}

// STRING ('S'): a quoted Python 2 str literal with backslash escapes.
bool decode_quoted(std::string_view s, std::string& out) {
  if (s.size() < 2 || (s[0] != '\'' && s[0] != '"') || s.back() != s[0]) return false;
  s = s.substr(1, s.size() - 2);
  std::string raw;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\') {
      raw.push_back(s[i]);
      continue;
    }
    if (++i >= s.size()) return false;
    switch (s[i]) {
      case '\\': raw.push_back('\\'); break;
      case '\'': raw.push_back('\''); break;
      case '"': raw.push_back('"'); break;
      case 'n': raw.push_back('\n'); break;
      case 'r': raw.push_back('\r'); break;
      case 't': raw.push_back('\t'); break;
      case '0': raw.push_back('\0'); break;
      case 'x': {
        if (i + 2 >= s.size()) return false;
        int h1 = hexval(s[i + 1]), h2 = hexval(s[i + 2]);
        if (h1 < 0 || h2 < 0) return false;
        raw.push_back(static_cast<char>(h1 * 16 + h2));
        i += 2;
        break;
      }
      default: return false;
    }
  }
  out = latin1_to_utf8(raw);
  return true;
}

// LONG1/LONG4: n little-endian bytes of two's complement; in a.i where the value fits in int64,
// else its bytes in a.s (a.is_big).
inline void read_long(uint8_t op, SpanReader& r, Arg& a) {
  uint64_t n = op == LONG1 ? r.u8() : r.u32le();
  ByteSpan b = r.take(n, "LONG payload");
  a.is_big = false;
  if (n == 0) {
    a.i = 0;
  } else if (n <= 8) {
    uint64_t v = 0;
    for (size_t k = n; k-- > 0;) v = (v << 8) | b.data[k];
    if (n < 8 && (b.data[n - 1] & 0x80)) v |= ~uint64_t{0} << (8 * n);  // sign-extend
    a.i = static_cast<int64_t>(v);
  } else {
    // Fits in int64 if every byte above the 8th is pure sign extension.
    bool neg = b.data[n - 1] & 0x80;
    bool fits = ((b.data[7] & 0x80) != 0) == neg;
    for (size_t k = 8; k < n && fits; ++k) fits = b.data[k] == (neg ? 0xFF : 0x00);
    if (fits) {
      uint64_t v = 0;
      for (size_t k = 8; k-- > 0;) v = (v << 8) | b.data[k];
      a.i = static_cast<int64_t>(v);
    } else {
      a.is_big = true;
      a.s = b.view();
    }
  }
}

// INT: a decimal line; protocol 0 spells True and False as 01 and 00.
inline void read_int_line(SpanReader& r, size_t op_pos, Arg& a) {
  std::string_view s = r.line("INT");
  if (s == "00" || s == "01") {
    a.is_bool = true;
    a.i = s == "01";
  } else {
    a.is_bool = false;
    a.i = parse_text_int(r, op_pos, s, "INT");
  }
}

inline void read_float_line(SpanReader& r, size_t op_pos, Arg& a) {
  std::string tmp(r.line("FLOAT"));
  char* end = nullptr;
  a.f = std::strtod(tmp.c_str(), &end);
  if (tmp.empty() || end != tmp.c_str() + tmp.size())
    r.fail_at(op_pos, "FLOAT with a malformed number '" + tmp.substr(0, 40) + "'");
}

// GET/PUT: the memo index as a decimal line.
inline void read_memo_line(SpanReader& r, size_t op_pos, Arg& a) {
  std::string_view s = r.line("memo index");
  int64_t v = parse_text_int(r, op_pos, s, "memo index");
  if (v < 0) r.fail_at(op_pos, "negative memo index");
  a.u = static_cast<uint64_t>(v);
}

[[noreturn, gnu::cold]] void unknown_opcode(SpanReader& r, size_t op_pos, uint8_t op) {
  char hex[8];
  std::snprintf(hex, sizeof hex, "0x%02x", op);
  r.fail_at(op_pos, std::string("unknown pickle opcode ") + hex);
}

// Reads the inline argument of `op`. Shared by the scan pass and the decode pass so the two
// can never disagree about where an opcode ends.
void read_arg(uint8_t op, SpanReader& r, size_t op_pos, Arg& a) {
  switch (op) {
    case PROTO: a.u = r.u8(); break;
    case FRAME: {
      a.u = r.u64le();
      if (a.u > r.remaining())
        r.fail_at(op_pos, "FRAME of " + std::to_string(a.u) + " bytes runs past the end of the data (" +
                              std::to_string(r.remaining()) + " bytes left)");
      break;
    }
    case BININT: a.i = r.i32le(); break;
    case BININT1: a.i = r.u8(); break;
    case BININT2: a.i = r.u16le(); break;
    case LONG1:
    case LONG4: read_long(op, r, a); break;
    case INT: read_int_line(r, op_pos, a); break;
    case LONG: a.i = parse_text_int(r, op_pos, r.line("LONG"), "LONG"); break;
    case FLOAT: read_float_line(r, op_pos, a); break;
    case BINFLOAT: a.f = r.f64be(); break;
    case SHORT_BINUNICODE:
    case SHORT_BINBYTES:
    case SHORT_BINSTRING: a.s = r.take(r.u8(), "string").view(); break;
    case BINUNICODE:
    case BINBYTES: a.s = r.take(r.u32le(), "string").view(); break;
    case BINSTRING: {
      int32_t n = r.i32le();
      if (n < 0) r.fail_at(op_pos, "BINSTRING with a negative length");
      a.s = r.take(static_cast<uint64_t>(n), "string").view();
      break;
    }
    case BINUNICODE8:
    case BINBYTES8:
    case BYTEARRAY8: a.s = r.take(r.u64le(), "string").view(); break;
    case STRING: a.s = r.line("STRING"); break;
    case UNICODE: a.s = r.line("UNICODE"); break;
    case GLOBAL:
    case INST:
      a.s = r.line("module name");
      a.s2 = r.line("class name");
      break;
    case PERSID: a.s = r.line("PERSID"); break;
    case GET:
    case PUT: read_memo_line(r, op_pos, a); break;
    case BINGET:
    case BINPUT: a.u = r.u8(); break;
    case LONG_BINGET:
    case LONG_BINPUT: a.u = r.u32le(); break;
    case EXT1: a.u = r.u8(); break;
    case EXT2: a.u = r.u16le(); break;
    case EXT4: a.u = r.u32le(); break;
    case MARK:
    case STOP:
    case POP:
    case POP_MARK:
    case DUP:
    case NONE:
    case BINPERSID:
    case REDUCE:
    case APPEND:
    case BUILD:
    case DICT:
    case EMPTY_DICT:
    case APPENDS:
    case LIST:
    case EMPTY_LIST:
    case OBJ:
    case SETITEM:
    case TUPLE:
    case EMPTY_TUPLE:
    case SETITEMS:
    case NEWOBJ:
    case TUPLE1:
    case TUPLE2:
    case TUPLE3:
    case NEWTRUE:
    case NEWFALSE:
    case EMPTY_SET:
    case ADDITEMS:
    case FROZENSET:
    case NEWOBJ_EX:
    case STACK_GLOBAL:
    case MEMOIZE:
    case NEXT_BUFFER:
    case READONLY_BUFFER: break;
    default: unknown_opcode(r, op_pos, op);
  }
}

// The scan steps over opcodes itself while this many bytes are left: the longest fixed-size
// opcode (BINFLOAT) and more than a GET or a length byte needs. Closer to the end, read_arg.
constexpr size_t kScanSlack = 9;

inline uint32_t load_u32le(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

inline uint64_t load_u64le(const uint8_t* p) {
  return uint64_t{load_u32le(p)} | uint64_t{load_u32le(p + 4)} << 32;
}

// Eight bytes as one word in the machine's order: the byte templates of Machine (the scan's and
// the flat path's) are words loaded this way, compared with words of the input loaded the same way.
inline uint64_t load_word(const uint8_t* p) {
  uint64_t w;
  std::memcpy(&w, p, 8);
  return w;
}

// A template's `len` bytes (at least 8) as ceil(len / 8) words, word i at 8 * i and the last at
// len - 8 (overlapping the one before it where len is not a multiple of 8), each masked: only
// the mask's bytes are compared.
inline void template_words(const uint8_t* bytes, const uint8_t* mask, size_t len, uint64_t* word, uint64_t* masks) {
  const size_t nwords = (len + 7) / 8;
  for (size_t w = 0; w < nwords; ++w) {
    const size_t off = w + 1 < nwords ? 8 * w : len - 8;
    masks[w] = load_word(mask + off);
    word[w] = load_word(bytes + off) & masks[w];
  }
}

// Opcode runs the scan steps over at once, as little-endian words (first opcode lowest).
constexpr uint64_t kSizeCallTail = uint64_t{MEMOIZE} | uint64_t{TUPLE1} << 8 | uint64_t{MEMOIZE} << 16 |
                                   uint64_t{REDUCE} << 24 | uint64_t{MEMOIZE} << 32;
constexpr uint64_t kSetitemsBuild = uint64_t{SETITEMS} | uint64_t{BUILD} << 8;
// The start of every dataclass object after the GET of its class: `() NEWOBJ MEMOIZE {} MEMOIZE (`.
constexpr uint64_t kObjectHead = uint64_t{EMPTY_TUPLE} | uint64_t{NEWOBJ} << 8 | uint64_t{MEMOIZE} << 16 |
                                 uint64_t{EMPTY_DICT} << 24 | uint64_t{MEMOIZE} << 32 | uint64_t{MARK} << 40;
constexpr uint64_t kLow48 = (uint64_t{1} << 48) - 1;

class Machine {
 public:
  Machine(ByteSpan data, const ParseOptions& opts)
      : data_(data), opts_(opts), tree_(std::make_unique<Tree>()), templates_(opts.byte_templates && opts.folder) {}

  std::unique_ptr<Tree> run() {
    auto t0 = std::chrono::steady_clock::now();
    scan();
    auto t1 = std::chrono::steady_clock::now();
    decode();
    if (opts_.stats) {
      auto t2 = std::chrono::steady_clock::now();
      opts_.stats->scan_seconds = std::chrono::duration<double>(t1 - t0).count();
      opts_.stats->decode_seconds = std::chrono::duration<double>(t2 - t1).count();
      opts_.stats->flat_template = tpl_hits_;
      opts_.stats->flat_generic = flat_generic_;
      opts_.stats->flat_declined = flat_declined_;
      opts_.stats->scan_templated = scan_templated_;
      opts_.stats->memo_kept = memo_vals_.size();
    }
    return std::move(tree_);
  }

 private:
  // Pass 1: walk the opcodes, collecting the memo indices that are ever read back. A pickle reads
  // the same few entries over and over (a 5-million-chunk `.metadata` has ~15 GETs per chunk of a
  // few thousand distinct entries), so the set is a bitmap: indices below the input size (every
  // index MEMOIZE can make, and those real picklers PUT) one bit each, bounding it to size/8
  // bytes; larger ones, which only a hand-made PUT/GET names, in a sorted list.
  //
  // Most opcodes of a large pickle have a fixed length or a one-byte length prefix, so the walk
  // steps over those itself and hands every other opcode (and any opcode too close to the end of
  // the input to be read without a bounds check) to read_arg, which owns the checks and the error
  // messages: the steps only decide where a well-formed opcode ends, as read_arg does.
  void scan() {
    SpanReader r(data_, opts_.source, opts_.base_offset);
    Arg a;
    uint64_t next_report = kReportEvery;
    const size_t size = data_.size;
    size_t pos = 0;
    const size_t fast_end = size >= kScanSlack ? size - kScanSlack + 1 : 0;  // kScanSlack bytes left
    while (pos < size) {
      if (pos >= next_report) {
        // Advanced whether or not anyone listens: the stretch below stops at next_report, so a
        // report point left behind would send every later opcode down the checked path.
        if (opts_.consumed) opts_.consumed(pos);
        next_report = pos + kReportEvery;
      }
      pos = step_over(pos, std::min<uint64_t>(fast_end, next_report));
      if (pos >= size) break;
      // Any opcode the table does not step over (or one near the end): read it the checked way.
      r.seek(pos);
      uint8_t op = r.u8();
      read_arg(op, r, pos, a);
      pos = r.pos();
      if (op == GET || op == BINGET || op == LONG_BINGET) note_get(a.u);
      if (op == STOP) break;
    }
    rank_memo();
  }

  // The opcodes from pos on that the scan steps over itself, while pos is below `limit` (at
  // least kScanSlack bytes before the end): where the first other one starts.
  size_t step_over(size_t pos, const size_t limit) {
    const uint8_t* const base = data_.data;
    while (pos < limit) {
      // A switch with constant steps, not a table of lengths: the branch is predicted (the
      // opcodes of a large pickle repeat a few patterns), so the next opcode's load does not
      // wait for this one's; a table makes every step wait for two dependent loads.
      switch (base[pos]) {
        // One-byte opcodes, and runs of them that a protocol 4 pickle repeats for every object
        // (each step is still a whole number of one-byte opcodes, within kScanSlack).
        case EMPTY_TUPLE:
          if (base[pos + 1] == NEWOBJ && base[pos + 2] == MEMOIZE && base[pos + 3] == EMPTY_DICT &&
              base[pos + 4] == MEMOIZE && base[pos + 5] == MARK) {
            pos += 6;
            continue;
          }
          pos += 1;
          continue;
        case TUPLE1:
        case TUPLE2:
        case TUPLE3: {
          // torch.Size(dims): `TUPLEn MEMOIZE TUPLE1 MEMOIZE REDUCE MEMOIZE`, often closing an
          // object (`SETITEMS BUILD`): every ChunkStorageMetadata has two, every key one.
          uint64_t w = load_u64le(base + pos);
          if (((w >> 8) & 0xFF'FFFF'FFFFull) == kSizeCallTail) {
            pos += (w >> 48) == kSetitemsBuild ? 8 : 6;
            continue;
          }
          pos += base[pos + 1] == MEMOIZE ? 2 : 1;
          continue;
        }
        case REDUCE:
        case NEWOBJ:
        case EMPTY_DICT:
        case EMPTY_LIST: pos += base[pos + 1] == MEMOIZE ? 2 : 1; continue;
        case SETITEMS: pos += base[pos + 1] == BUILD ? 2 : 1; continue;
        case MARK:
        case POP:
        case POP_MARK:
        case DUP:
        case NONE:
        case BINPERSID:
        case APPEND:
        case BUILD:
        case DICT:
        case APPENDS:
        case LIST:
        case OBJ:
        case SETITEM:
        case TUPLE:
        case NEWTRUE:
        case NEWFALSE:
        case EMPTY_SET:
        case ADDITEMS:
        case FROZENSET:
        case NEWOBJ_EX:
        case STACK_GLOBAL:
        case MEMOIZE:
        case NEXT_BUFFER:
        case READONLY_BUFFER: pos += 1; continue;
        case PROTO:
        case BININT1:
        case BINPUT:
        case EXT1: pos += 2; continue;
        case BININT2:
        case EXT2: pos += 3; continue;
        case BININT:
        case LONG_BINPUT:
        case EXT4: pos += 5; continue;
        case BINFLOAT: pos += 9; continue;
        case BINGET: pos = step_binget(pos, limit); continue;
        case LONG_BINGET: pos = step_long_binget(pos, limit); continue;
        case SHORT_BINUNICODE:
        case SHORT_BINBYTES:
        case SHORT_BINSTRING:
        case LONG1: {
          size_t n = 2 + size_t{base[pos + 1]};
          if (data_.size - pos < n) break;
          pos += n;
          if (pos < limit && base[pos] == MEMOIZE) ++pos;  // a string is memoized as it is made
          continue;
        }
        default: break;
      }
      break;
    }
    return pos;
  }

  // A BINGET at pos (below limit: kScanSlack bytes left): noted and stepped over, with the GET
  // or the object's head that follows it.
  [[gnu::always_inline]] size_t step_binget(size_t pos, size_t limit) {
    const uint8_t* const base = data_.data;
    if (base[pos + 2] == BINGET) {  // an attribute name and a class: two GETs in a row
      note_get(base[pos + 1]);
      note_get(base[pos + 3]);
      return pos + 4;
    }
    // A class, and the head of the object made of it (8 bytes: within kScanSlack).
    uint64_t w = load_u64le(base + pos);
    if ((w >> 16) == kObjectHead) {
      if (templates_ && scan_object(pos, base[pos + 1], limit)) return pos;
      note_get(base[pos + 1]);
      return pos + 8;
    }
    note_get(base[pos + 1]);
    return pos + 2;
  }

  [[gnu::always_inline]] size_t step_long_binget(size_t pos, size_t limit) {
    const uint8_t* const base = data_.data;
    const uint32_t idx = load_u32le(base + pos + 1);
    // A class and its object's head: 11 bytes, past kScanSlack, so bounded here.
    if (data_.size - pos >= 13 && (load_u64le(base + pos + 5) & kLow48) == kObjectHead) {
      if (templates_ && scan_object(pos, idx, limit)) return pos;
      note_get(idx);
      return pos + 11;
    }
    note_get(idx);
    return pos + 5;
  }

  // After the scan: each word's rank among the memo entries read back, and a slot for each.
  void rank_memo() {
    std::sort(far_.begin(), far_.end());
    far_.erase(std::unique(far_.begin(), far_.end()), far_.end());
    near_rank_.resize(near_bits_.size());
    uint64_t n = 0;
    for (size_t w = 0; w < near_bits_.size(); ++w) {
      near_rank_[w] = n;
      n += popcount64(near_bits_[w]);
    }
    near_count_ = n;
    memo_vals_.resize(static_cast<size_t>(n + far_.size()));
    memo_set_.assign(memo_vals_.size(), 0);
  }

  [[gnu::always_inline]] void note_get(uint64_t idx) {
    if (idx < data_.size) {
      size_t w = static_cast<size_t>(idx / 64);
      if (w >= near_bits_.size()) grow_bits(w);
      near_bits_[w] |= uint64_t{1} << (idx % 64);
    } else {
      far_.push_back(idx);
    }
  }

  [[gnu::noinline]] void grow_bits(size_t w) { near_bits_.resize(w + 1, 0); }

  // --- Scan templates ----------------------------------------------------------------------
  //
  // Most of a large `.metadata` is a few byte patterns repeated millions of times: torch's pickler
  // writes every ChunkStorageMetadata, MetadataIndex and _StorageInfo as the same opcodes, and only
  // their operands differ (ints, memo indices, the bytes of a short string). Of those bytes the
  // scan needs nothing but where each opcode ends and which memo indices the GETs among them name.
  // So at the GET of a class followed by an object's head, the run of opcodes from that GET through
  // the object's BUILD (at most kScanTplBytes; only opcodes of a fixed length or with a one-byte
  // length, no FRAME or STOP) is learnt once as a template: its opcode and length bytes and the
  // class's memo index kept as they are, the other operand bytes masked, the offsets of the other
  // GETs' operands noted. Bytes that match
  // the template outside its operands are the same opcodes with the same lengths (the first opcode
  // byte matches, hence its length, hence where the next one starts, and so on), all within the
  // input: the scan notes the GETs at the template's offsets and steps over the run at once, as
  // stepping opcode by opcode would have (these opcodes are never checked by the scan; read_arg
  // sees only what lies within kScanSlack of the end). Anything else is stepped over as before.
  // Templates are kept per class memo index (kScanBuckets buckets of kScanPerBucket, the last one
  // matched tried first, replaced in turn).
  static constexpr size_t kScanTplBytes = 128;
  static constexpr size_t kScanTplWords = kScanTplBytes / 8;
  static constexpr size_t kScanTplGets = 40;
  static constexpr size_t kScanBuckets = 16;
  static constexpr size_t kScanPerBucket = 8;
  struct ScanTpl {  // (set by scan_learn; 45 KiB for all, not zero-filled)
    uint32_t len, nwords;
    uint8_t nshort, nlong;
    uint8_t short_at[kScanTplGets];   // operand offsets of its BINGETs
    uint8_t long_at[kScanTplGets];    // and of its LONG_BINGETs
    uint8_t short_val[kScanTplGets];  // their indices in the object it was learnt from
    uint32_t long_val[kScanTplGets];
    uint64_t word[kScanTplWords], mask[kScanTplWords];  // word i at 8 * i, the last at len - 8
    ScanTpl* succ;                                      // the template matched right after this one last time, or null
  };
  static constexpr uint32_t kScanGiveUp = 256;  // failed learns of a bucket with no template
  struct ScanBucket {
    uint8_t n = 0, mru = 0, next = 0;
    uint32_t fails = 0;
    ScanTpl tpl[kScanPerBucket];
  };

  static bool scan_matches(const ScanTpl& t, const uint8_t* p) {
    if (((load_word(p) & t.mask[0]) ^ t.word[0]) != 0) return false;
    uint64_t diff = 0;
    const uint32_t last = t.nwords - 1;
    for (uint32_t w = 1; w < last; ++w) diff |= (load_word(p + 8 * w) & t.mask[w]) ^ t.word[w];
    diff |= (load_word(p + t.len - 8) & t.mask[last]) ^ t.word[last];
    return diff == 0;
  }

  // At pos, the GET of class `cls_idx` and an object's head: the run of opcodes a template knows
  // (learnt now if none does), its GETs noted and pos past it. False (nothing done): no template.
  // The class's own GET is part of the template's compared bytes: noted once, when learnt. Then,
  // while pos is below `limit`, the objects that follow as they followed last time (a storage
  // entry's key, then its _StorageInfo, then the next key): each template names the one matched
  // right after it last time, tried there first (a template that matches there is one the switch
  // would reach too: its bytes start with a class's GET and an object's head).
  bool scan_object(size_t& pos, uint64_t cls_idx, size_t limit) {
    const uint8_t* p = data_.data + pos;
    const size_t left = data_.size - pos;
    if (!scan_buckets_) scan_buckets_.reset(new ScanBucket[kScanBuckets]);
    ScanTpl* const prev = pos == chain_end_ ? chain_prev_ : nullptr;
    ScanBucket& b = scan_buckets_[cls_idx % kScanBuckets];
    ScanTpl* t = nullptr;
    if (b.n) {
      ScanTpl& m = b.tpl[b.mru];
      if (m.len <= left && scan_matches(m, p)) t = &m;
      for (uint8_t i = 0; !t && i < b.n; ++i) {
        ScanTpl& c = b.tpl[i];
        if (i != b.mru && c.len <= left && scan_matches(c, p)) {
          t = &c;
          b.mru = i;
        }
      }
    }
    if (!t) {
      // A class whose objects make no template (nested containers, text opcodes): tried no more.
      if (b.fails > kScanGiveUp && b.n == 0) return false;
      ScanTpl learnt;
      if (!scan_learn(p, left, learnt)) {
        ++b.fails;
        return false;
      }
      // Every GET of the object it was learnt from noted now: a later match notes only the
      // indices that differ from these (most are its attribute names, the same every time).
      note_get(cls_idx);
      for (uint32_t k = 0; k < learnt.nshort; ++k) note_get(learnt.short_val[k] = p[learnt.short_at[k]]);
      for (uint32_t k = 0; k < learnt.nlong; ++k) note_get(learnt.long_val[k] = load_u32le(p + learnt.long_at[k]));
      ScanTpl& slot = b.tpl[b.next];
      slot = learnt;
      b.mru = b.next;
      b.next = static_cast<uint8_t>((b.next + 1) % kScanPerBucket);
      if (b.n < kScanPerBucket) ++b.n;
      t = &slot;
    } else {
      scan_notes(*t, p);
    }
    pos += t->len;
    ++scan_templated_;
    if (prev) prev->succ = t;
    for (ScanTpl* n; pos < limit && (n = t->succ) != nullptr; t = n) {
      const uint8_t* q = data_.data + pos;
      if (n->len > data_.size - pos || !scan_matches(*n, q)) break;
      scan_notes(*n, q);
      pos += n->len;
      ++scan_templated_;
    }
    chain_prev_ = t;
    chain_end_ = pos;
    return true;
  }

  // The GETs of an object that matched template t at p, but those of the object it was learnt
  // from (noted then).
  [[gnu::always_inline]] void scan_notes(const ScanTpl& t, const uint8_t* p) {
    for (uint32_t k = 0; k < t.nshort; ++k) {
      const uint8_t idx = p[t.short_at[k]];
      if (idx != t.short_val[k]) note_get(idx);
    }
    for (uint32_t k = 0; k < t.nlong; ++k) {
      const uint32_t idx = load_u32le(p + t.long_at[k]);
      if (idx != t.long_val[k]) note_get(idx);
    }
  }

  // The template of the opcodes at p (left bytes to the end of the input) through the first BUILD,
  // at most kScanTplBytes. False when an opcode it does not take (or more GETs than it keeps)
  // comes first.
  static bool scan_learn(const uint8_t* p, size_t left, ScanTpl& t) {
    const size_t cap = std::min(left, kScanTplBytes);
    uint8_t mask[kScanTplBytes];
    t.nshort = t.nlong = 0;
    t.succ = nullptr;
    size_t q = 0;
    bool built = false;
    while (q < cap) {
      size_t n = 0, from = 1;  // the opcode's length; its operand's first byte (masked from there)
      switch (p[q]) {
        case BINGET:
          if (t.nshort == kScanTplGets) break;
          n = 2;
          if (q + n <= cap) t.short_at[t.nshort++] = static_cast<uint8_t>(q + 1);
          break;
        case LONG_BINGET:
          if (t.nlong == kScanTplGets) break;
          n = 5;
          if (q + n <= cap) t.long_at[t.nlong++] = static_cast<uint8_t>(q + 1);
          break;
        case BININT1:
        case BINPUT: n = 2; break;
        case BININT2: n = 3; break;
        case BININT:
        case LONG_BINPUT: n = 5; break;
        case BINFLOAT: n = 9; break;
        case LONG1:
        case SHORT_BINUNICODE:
        case SHORT_BINBYTES:
        case SHORT_BINSTRING:
          if (q + 2 <= cap)
            n = 2 + size_t{p[q + 1]};
          else
            n = cap + 1;  // does not fit
          from = 2;       // the length byte is kept
          break;
        case MEMOIZE:
        case MARK:
        case EMPTY_TUPLE:
        case EMPTY_DICT:
        case EMPTY_LIST:
        case EMPTY_SET:
        case NEWOBJ:
        case REDUCE:
        case TUPLE:
        case TUPLE1:
        case TUPLE2:
        case TUPLE3:
        case NONE:
        case NEWTRUE:
        case NEWFALSE:
        case APPEND:
        case APPENDS:
        case SETITEM:
        case SETITEMS:
        case DICT:
        case LIST:
        case POP:
        case POP_MARK:
        case DUP:
        case BINPERSID:
        case STACK_GLOBAL:
        case ADDITEMS:
        case FROZENSET:
        case BUILD: n = 1; break;
        default: break;
      }
      if (n == 0 || q + n > cap) break;
      if (q == 0) {  // the class: compared, so that each template stands for one class (noted below)
        from = n;
        t.nshort = t.nlong = 0;
      }
      std::memset(mask + q, 0xFF, from);
      std::memset(mask + q + from, 0, n - from);
      const bool end = p[q] == BUILD;
      q += n;
      if (end) {
        built = true;
        break;
      }
    }
    // Only a whole object: a run cut short (a FRAME inside it, an opcode not taken, the size cap)
    // would also match, as a prefix, every later object of its class, and stand for none of them.
    if (!built || q < 8) return false;
    t.len = static_cast<uint32_t>(q);
    t.nwords = static_cast<uint32_t>((q + 7) / 8);
    template_words(p, mask, q, t.word, t.mask);
    return true;
  }

  std::unique_ptr<ScanBucket[]> scan_buckets_;
  ScanTpl* chain_prev_ = nullptr;  // the template matched last, ending at chain_end_
  size_t chain_end_ = SIZE_MAX;
  uint64_t scan_templated_ = 0;

  [[noreturn]] void fail(const std::string& msg) { r_->fail_at(op_pos_, msg); }

  // Inlined (every opcode pushes); the failure is out of line.
  [[gnu::always_inline]] void push(const Value& v) {
    if (__builtin_expect(stack_.size() >= kMaxStack, 0)) stack_full();
    stack_.push_back(v);
  }
  [[noreturn, gnu::noinline, gnu::cold]] void stack_full() {
    fail("pickle stack exceeds " + std::to_string(kMaxStack) + " entries");
  }
  Value pop() {
    if (stack_.size() <= floor()) fail(std::string(op_name(op_)) + " on an empty stack");
    Value v = stack_.back();
    stack_.pop_back();
    return v;
  }
  Value& top() {
    if (stack_.size() <= floor()) fail(std::string(op_name(op_)) + " on an empty stack");
    return stack_.back();
  }
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  size_t pop_mark() {
    if (marks_.empty()) fail(std::string(op_name(op_)) + " without a MARK");
    size_t m = marks_.back();
    marks_.pop_back();
    return m;
  }

  // A value leaving the stack for a container: freeze it if nothing can reach it again.
  // (Only an open container can be frozen: the check is inlined, the copy is not.)
  Value settle(const Value& v) { return (v.flags & Value::kBoxed) ? tree_->freeze(v) : v; }

  void check_depth(uint32_t d) {
    if (d > opts_.limits.max_depth) fail("nesting deeper than " + std::to_string(opts_.limits.max_depth) + " levels");
  }

  Value frozen(Kind kind, size_t from) {
    for (size_t i = from; i < stack_.size(); ++i) stack_[i] = settle(stack_[i]);
    Value v = tree_->make_frozen(kind, stack_.data() + from, stack_.size() - from);
    check_depth(v.depth);
    stack_.resize(from);
    return v;
  }

  // Appends stack_[from..] into the open container `target` (a List, Set or Dict).
  void extend(Value& target, size_t from, Kind want) {
    if (target.kind != want || !(target.flags & Value::kBoxed))
      fail(std::string(op_name(op_)) + " on a " + kind_name(target.kind) + ", expected a " + kind_name(want));
    if (want == Kind::Dict && (stack_.size() - from) % 2 != 0) fail("SETITEMS with an odd number of items");
    auto& items = tree_->open(target).items;
    if (want == Kind::Dict && opts_.folder) {
      for (size_t i = from; i < stack_.size(); i += 2) {
        Value k = settle(stack_[i]), v = settle(stack_[i + 1]);
        check_depth(k.depth + 1u);
        check_depth(v.depth + 1u);
        target.depth = std::max<uint16_t>(target.depth, static_cast<uint16_t>(std::max(k.depth, v.depth) + 1));
        if (opts_.folder->join_pair(items.size() >= 2 ? &items[items.size() - 2] : nullptr, k, v)) continue;
        items.push_back(k);
        items.push_back(v);
      }
      stack_.resize(from);
      return;
    }
    for (size_t i = from; i < stack_.size(); ++i) {
      Value v = settle(stack_[i]);
      check_depth(v.depth + 1u);
      target.depth = std::max<uint16_t>(target.depth, static_cast<uint16_t>(v.depth + 1));
      items.push_back(v);
    }
    stack_.resize(from);
  }

  // Whether memo entry `idx` is ever read back (has a slot).
  [[gnu::always_inline]] bool read_back(uint64_t idx) const {
    if (idx < data_.size) {
      size_t w = static_cast<size_t>(idx / 64);
      return w < near_bits_.size() && ((near_bits_[w] >> (idx % 64)) & 1);
    }
    return std::binary_search(far_.begin(), far_.end(), idx);
  }

  // Where memo entry `idx` is kept, or nullptr if nothing ever reads it back.
  [[gnu::always_inline]] Value* memo_slot(uint64_t idx) {
    uint64_t slot;
    if (idx < data_.size) {
      size_t w = static_cast<size_t>(idx / 64);
      uint64_t bit = uint64_t{1} << (idx % 64);
      if (w >= near_bits_.size() || !(near_bits_[w] & bit)) return nullptr;
      slot = near_rank_[w] + popcount64(near_bits_[w] & (bit - 1));
    } else {
      auto it = std::lower_bound(far_.begin(), far_.end(), idx);
      if (it == far_.end() || *it != idx) return nullptr;
      slot = near_count_ + static_cast<uint64_t>(it - far_.begin());
    }
    return &memo_vals_[static_cast<size_t>(slot)];
  }

  void memo_put(uint64_t idx) {
    if (idx > opts_.limits.max_memo_index) fail("memo index " + std::to_string(idx) + " is absurdly large");
    Value& v = top();
    Value* slot = memo_slot(idx);
    if (!slot) return;  // never read back: no need to keep it
    if (v.flags & Value::kBoxed) tree_->open(v).pinned = true;
    v.flags |= Value::kMemo;
    uint8_t& set = memo_set_[static_cast<size_t>(slot - memo_vals_.data())];
    memo_overwrites_ += set;  // a stored entry replaced (PUT): templates check their entries again
    *slot = v;
    set = 1;
  }

  void memo_get(uint64_t idx) {
    const Value* slot = stored_slot(idx);
    if (!slot) fail("memo entry " + std::to_string(idx) + " is read before it was stored");
    push(*slot);
  }

  // --- The folded-object fast path ---------------------------------------------------------
  //
  // A large `.metadata` is millions of small objects pickled alike: `cls () NEWOBJ {} (k v ... u
  // BUILD`, each key a memo read or a short string and each value an int, None, a bool, a short
  // string, a memo read or a torch.Size. Run through the generic opcodes, each costs a score of
  // stack pushes, arena allocations and give-backs that the Folder then throws away. Here such an
  // object is read in one pass, at the GET of its class, into a scratch state that is offered to
  // the Folder exactly as BUILD would offer it. It is taken only when the generic run is known
  // to end in that same fold: every byte matches the pattern and lies within the input; every memo
  // read names a stored entry; no memo entry it makes is ever read back (then the object or its
  // parts would be shared, and shared objects are never folded); no cap (stack, marks, depth,
  // memo index) could fire on the way; and the Folder accepts the state. Otherwise nothing has
  // changed and the opcodes run one by one from the GET on, with their checks and errors.
  static constexpr size_t kFlatItems = 32;  // keys and values of one object's state
  static constexpr size_t kFlatDims = 64;   // ints of its torch.Size values together

  struct Flat {
    const uint8_t* p;
    const uint8_t* end;
    uint64_t memo;  // memo_len_ as the generic run would have it
  };

  // A MEMOIZE at p, if any. Whether its entry is ever read back (then the object is not taken) is
  // asked once for all the entries an object makes (flat_memo_clear).
  [[gnu::always_inline]] static bool flat_memoize(Flat& f) {
    if (f.p < f.end && *f.p == MEMOIZE) {
      ++f.memo;
      ++f.p;
    }
    return true;
  }

  // No memo entry in [from, to) is ever read back, and none is beyond the memo index cap.
  bool flat_memo_clear(uint64_t from, uint64_t to) const {
    if (from == to) return true;
    if (to - 1 > opts_.limits.max_memo_index) return false;
    if (to > data_.size) {
      for (uint64_t i = from; i < to; ++i)
        if (read_back(i)) return false;
      return true;
    }
    const size_t nw = near_bits_.size();
    size_t w0 = static_cast<size_t>(from / 64), w1 = static_cast<size_t>((to - 1) / 64);
    for (size_t w = w0; w <= w1 && w < nw; ++w) {
      uint64_t m = ~uint64_t{0};
      if (w == w0) m &= ~uint64_t{0} << (from % 64);
      if (w == w1) m &= ~uint64_t{0} >> (63 - (to - 1) % 64);
      if (near_bits_[w] & m) return false;
    }
    return true;
  }

  // A stored memo entry read by BINGET/LONG_BINGET at p.
  bool flat_get(Flat& f, Value& out) {
    uint64_t idx;
    if (*f.p == BINGET) {
      if (f.end - f.p < 2) return false;
      idx = f.p[1];
      f.p += 2;
    } else {
      if (f.end - f.p < 5) return false;
      idx = load_u32le(f.p + 1);
      f.p += 5;
    }
    const Value* slot = stored_slot(idx);
    if (!slot) return false;
    out = *slot;
    return true;
  }

  // The slot of memo entry `idx` once it is stored, else nullptr. A large pickle reads the same
  // few entries again and again (class globals, attribute names): a small direct-mapped cache of
  // their slots saves the rank lookup. A slot never moves and is never unset once set.
  [[gnu::always_inline]] const Value* stored_slot(uint64_t idx) {
    GetCache& c = get_cache_[idx % kGetCache];
    if (c.idx == idx) return c.slot;
    Value* slot = memo_slot(idx);
    if (!slot || !memo_set_[static_cast<size_t>(slot - memo_vals_.data())]) return nullptr;
    c = {idx, slot};
    return slot;
  }
  struct GetCache {
    uint64_t idx = UINT64_MAX;
    const Value* slot = nullptr;
  };
  static constexpr size_t kGetCache = 256;
  std::array<GetCache, kGetCache> get_cache_;

  // An int of BININT1/BININT2/BININT/LONG1 (up to 8 bytes) at p.
  static bool flat_int(Flat& f, int64_t& out) {
    switch (*f.p) {
      case BININT1:
        if (f.end - f.p < 2) return false;
        out = f.p[1];
        f.p += 2;
        return true;
      case BININT2:
        if (f.end - f.p < 3) return false;
        out = f.p[1] | f.p[2] << 8;
        f.p += 3;
        return true;
      case BININT:
        if (f.end - f.p < 5) return false;
        out = static_cast<int32_t>(load_u32le(f.p + 1));
        f.p += 5;
        return true;
      case LONG1: {
        if (f.end - f.p < 2) return false;
        size_t n = f.p[1];
        if (n > 8 || static_cast<size_t>(f.end - f.p) < 2 + n) return false;
        const uint8_t* b = f.p + 2;
        uint64_t v = 0;
        for (size_t k = n; k-- > 0;) v = (v << 8) | b[k];
        if (n > 0 && n < 8 && (b[n - 1] & 0x80)) v |= ~uint64_t{0} << (8 * n);  // as read_arg
        out = static_cast<int64_t>(v);
        f.p += 2 + n;
        return true;
      }
      default: return false;
    }
  }

  // After GET(torch.Size): `(ints) TUPLEn|EMPTY_TUPLE [MEMOIZE] TUPLE1 [MEMOIZE] REDUCE`.
  bool flat_size(Flat& f, Value& out, size_t& ndims) {
    size_t first = ndims;
    while (f.p < f.end && *f.p != TUPLE1 && *f.p != TUPLE2 && *f.p != TUPLE3 && *f.p != EMPTY_TUPLE) {
      int64_t v;
      if (ndims == kFlatDims || !flat_int(f, v)) return false;
      Value d;
      d.kind = Kind::Int;
      d.bits = static_cast<uint64_t>(v);
      flat_dims_[ndims++] = d;
    }
    if (f.p == f.end) return false;
    size_t n = ndims - first;
    size_t want = *f.p == EMPTY_TUPLE ? 0 : static_cast<size_t>(*f.p - TUPLE1 + 1);
    if (n != want) return false;
    ++f.p;
    if (!flat_memoize(f)) return false;
    if (f.end - f.p < 1 || *f.p != TUPLE1) return false;
    ++f.p;
    if (!flat_memoize(f)) return false;
    if (f.end - f.p < 1 || *f.p != REDUCE) return false;
    ++f.p;
    out = Value{};
    out.kind = Kind::Size;
    out.len = static_cast<uint32_t>(n);
    out.depth = n ? 1 : 0;
    out.bits = n ? reinterpret_cast<uint64_t>(&flat_dims_[first]) : 0;
    return true;
  }

  // At a BINGET/LONG_BINGET of memo entry `idx` (r just past it): the whole object, folded and
  // pushed, or false with nothing changed.
  bool fold_flat_object(uint64_t idx, SpanReader& r) {
    const uint8_t* const base = data_.data;
    Flat f{base + r.pos(), base + data_.size, memo_len_};
    static constexpr uint8_t kHead[] = {EMPTY_TUPLE, NEWOBJ};
    if (f.end - f.p < 2 || f.p[0] != kHead[0] || f.p[1] != kHead[1]) return false;
    const Value* slot = stored_slot(idx);
    if (!slot || slot->kind != Kind::Global) return false;
    const GlobalRef& cls = slot->as_global();
    // What the generic run pushes and checks on the way: class, args, object, dict, mark, items.
    if (opts_.limits.max_depth < 8 || marks_.size() >= opts_.limits.max_marks ||
        stack_.size() + 4 + kFlatItems >= kMaxStack)
      return false;
    const uint8_t* const obj = f.p;
    if (templates_) {
      const Template* t = match_template(idx, slot->bits, obj, f.end);
      if (t) {
        Value out;
        if (finish_flat(cls, t->nitems, obj + t->len, memo_len_ + t->memos, r, out)) {
          ++tpl_hits_;
          return true;
        }
        ++flat_declined_;  // (the generic read below comes to the same state: declined again)
        return false;
      }
    }
    size_t n = 0;
    if (!flat_head(f) || !flat_state(f, obj, n)) return false;
    if (n % 2 != 0 || f.end - f.p < 2 || f.p[1] != BUILD) return false;
    f.p += 2;  // SETITEMS BUILD
    Value out;
    if (!finish_flat(cls, n, f.p, f.memo, r, out)) {
      ++flat_declined_;
      return false;
    }
    ++flat_generic_;
    if (templates_) learn_template(idx, slot->bits, obj, f.p, n, f.memo - memo_len_before_);
    return true;
  }

  // `() NEWOBJ [MEMOIZE] {} [MEMOIZE] (`: an object's head, up to its state's MARK.
  [[gnu::always_inline]] static bool flat_head(Flat& f) {
    f.p += 2;
    if (!flat_memoize(f)) return false;
    if (f.end - f.p < 2 || f.p[0] != EMPTY_DICT) return false;
    ++f.p;
    if (!flat_memoize(f)) return false;
    if (f.end - f.p < 1 || *f.p != MARK) return false;
    ++f.p;
    return true;
  }

  // The state's keys and values (obj: the object's bytes), into flat_items_[0, n) and learn_,
  // up to its SETITEMS.
  [[gnu::always_inline]] bool flat_state(Flat& f, const uint8_t* obj, size_t& n) {
    size_t ndims = 0;
    while (true) {
      if (f.p == f.end) return false;
      if (*f.p == SETITEMS) return true;
      if (n == kFlatItems) return false;
      Value v;
      learn_[n].at = static_cast<uint32_t>(f.p - obj);
      learn_[n].src = kVarGet;
      if (!flat_item(f, v, learn_[n].src, ndims)) return false;
      if (!flat_memoize(f)) return false;
      flat_items_[n++] = v;
    }
  }

  // One key or value of the state at f.p, and how a template is to read it (src).
  [[gnu::always_inline]] bool flat_item(Flat& f, Value& v, uint8_t& src, size_t& ndims) {
    const uint8_t op = *f.p;
    switch (op) {
      case BINGET:
      case LONG_BINGET:
        if (!flat_get(f, v)) return false;
        if (v.kind == Kind::Global && f.p < f.end && *f.p != BINGET && *f.p != LONG_BINGET &&
            *f.p != SHORT_BINUNICODE && *f.p != SETITEMS) {
          src = kSize;
          return flat_call(f, v, ndims);
        }
        return v.depth + 1u <= opts_.limits.max_depth;
      case BININT1:
      case BININT2:
      case BININT:
      case LONG1: {
        int64_t i;
        if (!flat_int(f, i)) return false;
        v.kind = Kind::Int;
        v.bits = static_cast<uint64_t>(i);
        src = kInt;
        return true;
      }
      case NONE:
        ++f.p;
        src = kConst;
        return true;
      case NEWTRUE:
      case NEWFALSE:
        v.kind = Kind::Bool;
        v.bits = op == NEWTRUE;
        ++f.p;
        src = kConst;
        return true;
      case SHORT_BINUNICODE: src = kStr; return flat_str(f, v);
      default: return false;
    }
  }

  // A call of the global v just read: only torch.Size(dims) is read here.
  bool flat_call(Flat& f, Value& v, size_t& ndims) {
    const GlobalRef& g = v.as_global();
    if (&g != size_global_) {
      if (size_global_ || g.module != "torch" || g.name != "Size") return false;
      size_global_ = &g;  // the Tree interns globals: one GlobalRef per (module, name)
    }
    return flat_size(f, v, ndims);
  }

  // A SHORT_BINUNICODE at f.p, valid UTF-8.
  static bool flat_str(Flat& f, Value& v) {
    if (f.end - f.p < 2) return false;
    size_t len = f.p[1];
    if (static_cast<size_t>(f.end - f.p) < 2 + len) return false;
    std::string_view s(reinterpret_cast<const char*>(f.p + 2), len);
    if (check_utf8(s) != Utf8::ok) return false;
    v.kind = Kind::Str;
    v.len = static_cast<uint32_t>(len);
    v.bits = reinterpret_cast<uint64_t>(s.data());
    f.p += 2 + len;
    return true;
  }

  // The object read (its state in flat_items_[0, n), ending before `end`, its memo entries up to
  // `memo`), offered to the Folder as BUILD would offer it, and pushed when folded.
  bool finish_flat(const GlobalRef& cls, size_t n, const uint8_t* end, uint64_t memo, SpanReader& r, Value& out) {
    if (!flat_memo_clear(memo_len_, memo)) return false;
    Value state;
    state.kind = Kind::Dict;
    state.len = static_cast<uint32_t>(n);
    state.bits = reinterpret_cast<uint64_t>(flat_items_.data());
    Value args;
    args.kind = Kind::Tuple;
    if (!opts_.folder->fold(cls, args, state, out)) return false;
    memo_len_before_ = memo_len_;
    memo_len_ = memo;
    r.seek(static_cast<size_t>(end - data_.data));
    push(out);
    return true;
  }

  // --- Byte templates of flat objects ------------------------------------------------------
  //
  // A large `.metadata` repeats a few byte patterns millions of times: torch's pickler writes
  // every ChunkStorageMetadata, MetadataIndex and _StorageInfo as the same opcodes, with the same
  // memo reads for its class and attribute names; only the ints, some memo reads of values (a
  // tensor's name) and short strings (a file name) differ. Once the flat path above has read and
  // folded an object, its bytes (from after the class's GET through BUILD) become a template: the
  // opcodes, length bytes and the memo indices of its keys (and of torch.Size) are compared as
  // they are, and the operands of ints, value reads and strings are read at their known offsets.
  // An object that matches a template byte for byte outside those operands is one the flat
  // path above would walk opcode by opcode along the same way, so it gets the same state from
  // the same bytes; the reads it would make are made here too: every memo entry the template
  // compared as an index still holds the value it held then (a PUT may replace an entry), every
  // value read names a stored entry that is not a global (the flat path may read a global as a
  // call) and not too deep, every string is UTF-8, and no memo entry the object makes is read
  // back. Anything else, and any object no template matches, takes the flat path above, which
  // falls back to the generic opcodes in turn. Nothing else is decoded here.
  enum : uint8_t { kVarGet, kFixedGet, kSize, kDim, kInt, kConst, kStr };
  static constexpr size_t kTplBytes = 128;  // an object's bytes after its class's GET
  static constexpr size_t kTplWords = kTplBytes / 8;
  static constexpr size_t kTplVars = 48;   // operands read from the bytes
  static constexpr size_t kTplFixed = 24;  // memo reads compared as indices
  static constexpr size_t kTemplates = 32;
  struct TplVar {
    uint8_t src;  // kVarGet, kDim, kInt, kStr
    uint8_t at;   // offset of its opcode in the object's bytes
    uint8_t dst;  // kDim: index into flat_dims_; else into flat_items_
  };
  struct Template {
    uint64_t cls_idx = UINT64_MAX;
    uint64_t cls_bits = 0;
    uint32_t len = 0, nwords = 0;
    uint32_t nitems = 0, nvars = 0, nfixed = 0;
    uint64_t memos = 0;
    uint64_t word[kTplWords], mask[kTplWords];  // word i at offset 8*i; the last one at len - 8
    Value items[kFlatItems];                    // the state as read, the operands' items overwritten by each match
    TplVar var[kTplVars];
    const Value* fixed_slot[kTplFixed];
    Value fixed_val[kTplFixed];
    uint64_t overwrites = 0;  // memo_overwrites_ when it was learnt
  };
  struct LearnItem {
    uint32_t at = 0;
    uint8_t src = 0;
  };
  std::array<LearnItem, kFlatItems> learn_;
  std::vector<Template> flat_tpls_;
  size_t next_template_ = 0;
  uint64_t memo_len_before_ = 0;
  uint64_t tpl_hits_ = 0, flat_generic_ = 0, flat_declined_ = 0;

  // The size of the int opcode at p (BININT1, BININT2, BININT, LONG1), 0 for anything else.
  static size_t int_size(const uint8_t* p) {
    switch (*p) {
      case BININT1: return 2;
      case BININT2: return 3;
      case BININT: return 5;
      case LONG1: return 2 + size_t{p[1]};
      default: return 0;
    }
  }

  // Makes a template of the object just folded: its bytes [obj, end), n items as learn_ saw them
  // (their values still in flat_items_, the dims of its sizes in flat_dims_).
  void learn_template(uint64_t cls_idx, uint64_t cls_bits, const uint8_t* obj, const uint8_t* end, size_t n,
                      uint64_t memos) {
    const size_t len = static_cast<size_t>(end - obj);
    if (len < 8 || len > kTplBytes) return;
    Template t;
    t.cls_idx = cls_idx;
    t.cls_bits = cls_bits;
    t.overwrites = memo_overwrites_;
    t.len = static_cast<uint32_t>(len);
    t.nwords = static_cast<uint32_t>((len + 7) / 8);
    t.nitems = static_cast<uint32_t>(n);
    t.memos = memos;
    std::copy(flat_items_.begin(), flat_items_.begin() + n, t.items);
    uint8_t mask[kTplBytes];
    std::memset(mask, 0xFF, len);
    auto fixed = [&](const uint8_t* p) {
      if (t.nfixed == kTplFixed) return false;
      uint64_t idx = *p == BINGET ? p[1] : load_u32le(p + 1);
      const Value* slot = stored_slot(idx);
      if (!slot) return false;
      t.fixed_slot[t.nfixed] = slot;
      t.fixed_val[t.nfixed] = *slot;
      ++t.nfixed;
      return true;
    };
    auto add = [&](uint8_t src, size_t at, size_t dst) {
      if (t.nvars == kTplVars) return false;
      t.var[t.nvars++] = TplVar{src, static_cast<uint8_t>(at), static_cast<uint8_t>(dst)};
      return true;
    };
    size_t ndims = 0;
    for (size_t i = 0; i < n; ++i) {
      const size_t at = learn_[i].at;
      const uint8_t* p = obj + at;
      switch (learn_[i].src) {
        case kVarGet:
          if (i % 2 == 0) {  // a key: an attribute name, compared as its memo index
            if (!fixed(p)) return;
            break;
          }
          if (!add(kVarGet, at, i)) return;
          std::memset(mask + at + 1, 0, *p == BINGET ? 1 : 4);
          break;
        case kSize: {
          if (!fixed(p)) return;
          // The Size value points at its dims in flat_dims_, where a match writes them again.
          if (t.items[i].bits != (t.items[i].len ? reinterpret_cast<uint64_t>(&flat_dims_[ndims]) : 0)) return;
          const uint8_t* q = p + (*p == BINGET ? 2 : 5);
          for (size_t w; (w = int_size(q)) != 0; q += w) {
            if (!add(kDim, static_cast<size_t>(q - obj), ndims++)) return;
            size_t from = *q == LONG1 ? 2 : 1;  // LONG1's length byte is compared
            std::memset(mask + (q - obj) + from, 0, w - from);
          }
          break;
        }
        case kInt: {
          if (!add(kInt, at, i)) return;
          size_t w = int_size(p), from = *p == LONG1 ? 2 : 1;
          std::memset(mask + at + from, 0, w - from);
          break;
        }
        case kConst: break;
        case kStr:
          if (!add(kStr, at, i)) return;
          std::memset(mask + at + 2, 0, p[1]);
          break;
        default: return;
      }
    }
    template_words(obj, mask, len, t.word, t.mask);
    if (flat_tpls_.size() < kTemplates) {
      flat_tpls_.push_back(t);
    } else {
      flat_tpls_[next_template_] = t;
      next_template_ = (next_template_ + 1) % kTemplates;
    }
  }

  // The template that matched last for a class (by its memo index), tried first: objects of
  // one class mostly repeat one shape.
  static constexpr size_t kHints = 64;
  std::array<uint8_t, kHints> hint_{};  // template index + 1, 0: none

  static bool matches(const Template& t, const uint8_t* obj) {
    uint64_t diff = 0;
    const uint32_t last = t.nwords - 1;
    for (uint32_t w = 0; w < last; ++w) diff |= (load_word(obj + 8 * w) & t.mask[w]) ^ t.word[w];
    diff |= (load_word(obj + t.len - 8) & t.mask[last]) ^ t.word[last];
    return diff == 0;
  }

  const Template* match_template(uint64_t cls_idx, uint64_t cls_bits, const uint8_t* obj, const uint8_t* end) {
    const size_t left = static_cast<size_t>(end - obj);
    uint8_t& hint = hint_[cls_idx % kHints];
    auto fits = [&](const Template& t) { return t.cls_idx == cls_idx && t.cls_bits == cls_bits && t.len <= left; };
    if (hint && hint <= flat_tpls_.size()) {
      const Template& t = flat_tpls_[hint - 1];
      if (fits(t) && matches(t, obj)) return fill_from_template(t, obj) ? &t : nullptr;
    }
    for (size_t i = 0; i < flat_tpls_.size(); ++i) {
      const Template& t = flat_tpls_[i];
      if (!fits(t) || !matches(t, obj)) continue;
      hint = static_cast<uint8_t>(i + 1);
      // The bytes are this template's: no other one matches them.
      return fill_from_template(t, obj) ? &t : nullptr;
    }
    return nullptr;
  }

  static_assert(sizeof(Value) == 16, "a Value is two words");
  static bool same_value(const Value* a, const Value* b) {
    uint64_t x[2], y[2];
    std::memcpy(x, a, sizeof x);
    std::memcpy(y, b, sizeof y);
    return ((x[0] ^ y[0]) | (x[1] ^ y[1])) == 0;
  }

  // An int of BININT1/BININT2/BININT/LONG1 (at most 8 bytes: the template compared its length)
  // at p, as flat_int reads it.
  static int64_t template_int(const uint8_t* p) {
    switch (*p) {
      case BININT1: return p[1];
      case BININT2: return p[1] | p[2] << 8;
      case BININT: return static_cast<int32_t>(load_u32le(p + 1));
      default: {
        Flat f{p, p + 2 + p[1], 0};
        int64_t v = 0;
        flat_int(f, v);
        return v;
      }
    }
  }

  bool fill_from_template(const Template& t, const uint8_t* obj) {
    // (A stored memo entry changes only when a PUT replaces it: none did since it was learnt, then
    // every entry it compared still holds its value.)
    if (t.overwrites != memo_overwrites_)
      for (uint32_t k = 0; k < t.nfixed; ++k)
        if (!same_value(t.fixed_slot[k], &t.fixed_val[k])) return false;
    std::memcpy(flat_items_.data(), t.items, t.nitems * sizeof(Value));
    for (uint32_t i = 0; i < t.nvars; ++i) {
      const TplVar& s = t.var[i];
      const uint8_t* p = obj + s.at;
      switch (s.src) {
        case kDim:
        case kInt: {
          Value v;
          v.kind = Kind::Int;
          v.bits = static_cast<uint64_t>(template_int(p));
          (s.src == kDim ? flat_dims_[s.dst] : flat_items_[s.dst]) = v;
          break;
        }
        case kVarGet: {
          uint64_t idx = *p == BINGET ? p[1] : load_u32le(p + 1);
          const Value* slot = stored_slot(idx);
          if (!slot || slot->kind == Kind::Global || slot->depth + 1u > opts_.limits.max_depth) return false;
          flat_items_[s.dst] = *slot;
          break;
        }
        case kStr: {
          std::string_view str(reinterpret_cast<const char*>(p + 2), p[1]);
          if (check_utf8(str) != Utf8::ok) return false;
          Value v;
          v.kind = Kind::Str;
          v.len = p[1];
          v.bits = reinterpret_cast<uint64_t>(str.data());
          flat_items_[s.dst] = v;
          break;
        }
        default: return false;
      }
    }
    return true;
  }

  std::array<Value, kFlatItems> flat_items_;
  const GlobalRef* size_global_ = nullptr;  // torch.Size, once seen
  std::array<Value, kFlatDims> flat_dims_;

  Value make_string(Kind kind, std::string_view s) {
    if (s.size() > UINT32_MAX)
      throw UnsupportedError(Where(opts_.source, opts_.base_offset + op_pos_), "string longer than 4 GiB");
    if (kind == Kind::Str) check_text(s);
    return tree_->make_str(kind, s);
  }

  // Every str leaves the VM as strict UTF-8, so that reports (JSON, terminals) can show it.
  void check_text(std::string_view s) {
    Utf8 u = check_utf8(s);
    if (u == Utf8::invalid) fail("string is not valid UTF-8");
    if (u == Utf8::surrogate)
      throw UnsupportedError(Where(opts_.source, opts_.base_offset + op_pos_),
                             "string holds a UTF-16 surrogate (Python accepts it; dcpctl cannot show it)");
  }

  static Value make_int(int64_t i) {
    Value v;
    v.kind = Kind::Int;
    v.bits = static_cast<uint64_t>(i);
    return v;
  }

  Value reduce(const Value& callable, const Value& args) {
    if (callable.kind == Kind::Global) {
      const GlobalRef& g = callable.as_global();
      if (g.module == "torch" && g.name == "Size" && args.kind == Kind::Tuple && args.len == 1 &&
          args.items()[0].kind == Kind::Tuple) {
        const Value& dims = args.items()[0];
        bool all_int = true;
        for (const Value& d : dims.items()) all_int = all_int && d.kind == Kind::Int;
        if (all_int) {
          Value v = dims;
          v.kind = Kind::Size;
          tree_->discard(args);  // the 1-tuple around the dims, usually the last allocation
          return v;
        }
      }
      if (g.module == "collections" && g.name == "OrderedDict" && args.kind == Kind::Tuple && args.len == 0) {
        Value d = tree_->make_open(Kind::Dict);
        d.flags |= Value::kOrdered;
        return d;
      }
      // Protocol 2 spells sets as set([...]) and bytes as _codecs.encode(latin-1 text, 'latin1').
      if ((g.module == "builtins" || g.module == "__builtin__") && (g.name == "set" || g.name == "frozenset") &&
          args.kind == Kind::Tuple && args.len == 1 &&
          (args.items()[0].kind == Kind::List || args.items()[0].kind == Kind::Tuple)) {
        Items it = args.items()[0].items();
        Value v = tree_->make_frozen(Kind::Set, it.ptr, it.size());
        check_depth(v.depth);
        return v;
      }
      if (g.module == "_codecs" && g.name == "encode" && args.kind == Kind::Tuple && args.len == 2 &&
          args.items()[0].kind == Kind::Str && args.items()[1].kind == Kind::Str &&
          (args.items()[1].as_str() == "latin1" || args.items()[1].as_str() == "latin-1")) {
        std::string raw;
        if (utf8_to_latin1(args.items()[0].as_str(), raw)) return make_string(Kind::Bytes, raw);
      }
    }
    Value obj = tree_->make_object(callable, args);
    check_depth(obj.depth);
    return obj;
  }

  void build() {
    Value raw = pop();
    Value& obj = top();
    if (opts_.folder && obj.kind == Kind::Object && !(obj.flags & Value::kMemo) &&
        obj.as_object().callable.kind == Kind::Global) {
      const ObjectNode& node = obj.as_object();
      Value out;
      if (opts_.folder->fold(node.callable.as_global(), node.args, raw, out)) {
        // Give back what only this object held, newest first, so arena tails can be reused.
        if (raw.kind == Kind::Dict || raw.kind == Kind::Tuple) {
          Items it = raw.items();
          for (uint64_t i = it.size(); i-- > 0;) tree_->discard(it[i]);
        }
        tree_->discard(raw);
        tree_->discard(node.args);
        tree_->discard(obj);
        obj = out;
        return;
      }
    }
    Value state = settle(raw);
    if (obj.kind == Kind::Object) {
      check_depth(state.depth + 2u);
      const_cast<ObjectNode&>(obj.as_object()).state = state;
      obj.depth = std::max<uint16_t>(obj.depth, static_cast<uint16_t>(state.depth + 1));
    } else if (obj.kind == Kind::Dict && (obj.flags & Value::kBoxed) && state.kind == Kind::Dict) {
      // Copied first: the state may be this very dict (`} DUP BUILD`), whose storage the
      // appends reallocate.
      Items add = state.items();
      std::vector<Value> items(add.begin(), add.end());
      auto& dst = tree_->open(obj).items;
      dst.insert(dst.end(), items.begin(), items.end());
    } else {
      fail(std::string("BUILD on a ") + kind_name(obj.kind));
    }
  }

  // Pass 2: run the opcodes.
  void decode() {
    SpanReader r(data_, opts_.source, opts_.base_offset);
    r_ = &r;
    Arg a;
    uint64_t next_report = kReportEvery;
    while (true) {
      if (r.at_end()) r.fail("pickle ends without a STOP opcode");
      op_pos_ = r.pos();
      if (op_pos_ >= next_report && opts_.consumed) {
        opts_.consumed(op_pos_);
        next_report = op_pos_ + kReportEvery;
      }
      if (opts_.folder && get_or_fold(r)) continue;
      op_ = r.u8();
      read_arg(op_, r, op_pos_, a);
      if (execute(a, r)) return;
    }
  }

  // Most of a large `.metadata` is objects that start with a GET of their class: straight to the
  // fast path, as execute's BINGET/LONG_BINGET cases would go (when enough bytes are left; otherwise
  // read_arg gives the error), without the generic argument reader. False: not such a GET.
  [[gnu::always_inline]] bool get_or_fold(SpanReader& r) {
    const uint8_t* p = data_.data + op_pos_;
    const size_t left = data_.size - op_pos_;
    if (*p == BINGET && left >= 2) {
      op_ = BINGET;
      r.seek(op_pos_ + 2);
      if (!fold_flat_object(p[1], r)) memo_get(p[1]);
      return true;
    }
    if (*p == LONG_BINGET && left >= 5) {
      op_ = LONG_BINGET;
      r.seek(op_pos_ + 5);
      const uint64_t idx = load_u32le(p + 1);
      if (!fold_flat_object(idx, r)) memo_get(idx);
      return true;
    }
    return false;
  }

  // Runs opcode op_ with its argument a. True at STOP (the tree's root is set).
  [[gnu::always_inline]] bool execute(const Arg& a, SpanReader& r) {
    switch (op_) {
      case PROTO: check_protocol(a.u); break;
      case FRAME: break;
      case STOP:
        if (stack_.empty()) fail("STOP on an empty stack");
        tree_->root = stack_.back();
        return true;
      case MARK: mark(); break;
      case POP: pop_one(); break;
      case POP_MARK: stack_.resize(pop_mark()); break;
      case DUP: dup(); break;
      case NONE: push(Value{}); break;
      case NEWTRUE:
      case NEWFALSE: push(make_bool(op_ == NEWTRUE)); break;
      case INT: push(a.is_bool ? make_bool(a.i != 0) : make_int(a.i)); break;
      case BININT:
      case BININT1:
      case BININT2:
      case LONG: push(make_int(a.i)); break;
      case LONG1:
      case LONG4: push(a.is_big ? make_string(Kind::BigInt, a.s) : make_int(a.i)); break;
      case FLOAT:
      case BINFLOAT: push(make_float(a.f)); break;
      case SHORT_BINUNICODE:
      case BINUNICODE:
      case BINUNICODE8: push(make_string(Kind::Str, a.s)); break;
      case SHORT_BINBYTES:
      case BINBYTES:
      case BINBYTES8:
      case BYTEARRAY8: push(make_string(Kind::Bytes, a.s)); break;
      case SHORT_BINSTRING:
      case BINSTRING: push(make_string(Kind::Str, latin1_to_utf8(a.s))); break;
      case STRING: push_quoted(a.s); break;
      case UNICODE: push_raw_unicode(a.s); break;
      case EMPTY_TUPLE: push(empty_tuple()); break;
      case TUPLE1:
      case TUPLE2:
      case TUPLE3: push_small_tuple(); break;
      case TUPLE: push(frozen(Kind::Tuple, pop_mark())); break;
      case FROZENSET: push(frozen(Kind::Set, pop_mark())); break;
      case EMPTY_LIST: push(tree_->make_open(Kind::List)); break;
      case EMPTY_DICT: push(tree_->make_open(Kind::Dict)); break;
      case EMPTY_SET: push(tree_->make_open(Kind::Set)); break;
      case LIST:
      case DICT: push_marked_container(); break;
      case APPEND:
        if (stack_.size() < floor() + 2) fail("APPEND needs a list and an item");
        extend(stack_[stack_.size() - 2], stack_.size() - 1, Kind::List);
        break;
      case APPENDS:
      case SETITEMS:
      case ADDITEMS: extend_marked(); break;
      case SETITEM:
        if (stack_.size() < floor() + 3) fail("SETITEM needs a dict, a key and a value");
        extend(stack_[stack_.size() - 3], stack_.size() - 2, Kind::Dict);
        break;
      case GLOBAL:
        check_text(a.s);
        check_text(a.s2);
        push(tree_->make_global(a.s, a.s2));
        break;
      case STACK_GLOBAL: stack_global(); break;
      case REDUCE: {
        Value args = settle(pop());
        Value callable = settle(pop());
        push(reduce(callable, args));
        break;
      }
      case NEWOBJ: newobj(); break;
      case NEWOBJ_EX: newobj_ex(); break;
      case INST: inst(a); break;
      case OBJ: obj(); break;
      case BUILD: build(); break;
      case PERSID: push(tree_->make_persid(make_string(Kind::Str, a.s))); break;
      case BINPERSID: push(tree_->make_persid(settle(pop()))); break;
      case BINGET:
      case LONG_BINGET:
        if (opts_.folder && fold_flat_object(a.u, r)) break;
        memo_get(a.u);
        break;
      case GET: memo_get(a.u); break;
      case PUT:
      case BINPUT:
      case LONG_BINPUT:
        memo_put(a.u);
        memo_len_ = std::max(memo_len_, a.u + 1);
        break;
      case MEMOIZE: memo_put(memo_len_++); break;
      case EXT1:
      case EXT2:
      case EXT4: push_extension(a.u); break;
      case NEXT_BUFFER:
      case READONLY_BUFFER: unsupported("pickle uses out-of-band buffers (protocol 5 NEXT_BUFFER)");
      default: fail("unhandled opcode");
    }
    return false;
  }

  [[noreturn, gnu::cold]] void unsupported(const std::string& msg) {
    throw UnsupportedError(Where(opts_.source, opts_.base_offset + op_pos_), msg);
  }

  void check_protocol(uint64_t proto) {
    if (proto > 5) unsupported("pickle protocol " + std::to_string(proto) + " (5 is the newest known)");
  }

  void mark() {
    if (marks_.size() >= opts_.limits.max_marks)
      fail("more than " + std::to_string(opts_.limits.max_marks) + " nested MARKs");
    marks_.push_back(stack_.size());
  }

  void pop_one() {
    if (stack_.size() > floor())
      stack_.pop_back();
    else
      marks_.empty() ? fail("POP on an empty stack") : (void)marks_.pop_back();  // pickle pops a mark too
  }

  void dup() {
    top().flags |= Value::kMemo;
    Value v = top();
    if (v.flags & Value::kBoxed) tree_->open(v).pinned = true;
    push(v);
  }

  static Value empty_tuple() {
    Value v;
    v.kind = Kind::Tuple;
    return v;
  }

  static Value make_bool(bool b) {
    Value v;
    v.kind = Kind::Bool;
    v.bits = b;
    return v;
  }

  static Value make_float(double f) {
    Value v;
    v.kind = Kind::Float;
    std::memcpy(&v.bits, &f, sizeof f);
    return v;
  }

  void push_quoted(std::string_view s) {  // STRING
    std::string out;
    if (!decode_quoted(s, out)) fail("STRING with a malformed literal");
    push(make_string(Kind::Str, out));
  }

  void push_raw_unicode(std::string_view s) {  // UNICODE
    std::string out;
    if (!decode_raw_unicode_escape(s, out)) fail("UNICODE with a malformed escape");
    push(make_string(Kind::Str, out));
  }

  void push_small_tuple() {  // TUPLE1, TUPLE2, TUPLE3
    size_t n = static_cast<size_t>(op_ - TUPLE1 + 1);
    if (stack_.size() < floor() + n)
      fail(std::string(op_name(op_)) + " with fewer than " + std::to_string(n) + " items on the stack");
    push(frozen(Kind::Tuple, stack_.size() - n));
  }

  void push_marked_container() {  // LIST, DICT
    size_t m = pop_mark();
    Value c = tree_->make_open(op_ == LIST ? Kind::List : Kind::Dict);
    extend(c, m, c.kind);
    push(c);
  }

  void extend_marked() {  // APPENDS, SETITEMS, ADDITEMS
    size_t m = pop_mark();
    if (m <= floor() || m == 0) fail(std::string(op_name(op_)) + " with nothing below its MARK");
    Kind want = op_ == APPENDS ? Kind::List : op_ == SETITEMS ? Kind::Dict : Kind::Set;
    extend(stack_[m - 1], m, want);
  }

  void stack_global() {
    Value name = pop(), module = pop();
    if (module.kind != Kind::Str || name.kind != Kind::Str) fail("STACK_GLOBAL with non-string module or name");
    push(tree_->make_global(module.as_str(), name.as_str()));
  }

  void push_object(const Value& cls, const Value& args) {
    Value obj = tree_->make_object(cls, args);
    check_depth(obj.depth);
    push(obj);
  }

  void newobj() {
    Value args = settle(pop());
    Value cls = settle(pop());
    push_object(cls, args);
  }

  void newobj_ex() {
    Value kwargs = settle(pop());
    Value args = settle(pop());
    Value cls = settle(pop());
    if (kwargs.kind == Kind::Dict && !kwargs.items().empty()) {
      Value pair[2] = {args, kwargs};
      args = tree_->make_frozen(Kind::Tuple, pair, 2);
    }
    push_object(cls, args);
  }

  void inst(const Arg& a) {
    check_text(a.s);
    check_text(a.s2);
    Value args = frozen(Kind::Tuple, pop_mark());
    push(tree_->make_object(tree_->make_global(a.s, a.s2), args));
  }

  void obj() {
    size_t m = pop_mark();
    if (stack_.size() == m) fail("OBJ without a class");
    Value cls = settle(stack_[m]);
    Value args = frozen(Kind::Tuple, m + 1);
    stack_.pop_back();  // the class
    push_object(cls, args);
  }

  void push_extension(uint64_t code) {  // EXT1, EXT2, EXT4
    if (!opts_.opaque_extensions) unsupported("pickle uses the copyreg extension registry (EXT opcodes)");
    push(tree_->make_global(kExtensionModule, std::to_string(code)));
  }

  static constexpr size_t kMaxStack = size_t{1} << 26;
  static constexpr uint64_t kReportEvery = uint64_t{64} << 20;

  ByteSpan data_;
  const ParseOptions& opts_;
  std::unique_ptr<Tree> tree_;
  const bool templates_;  // byte templates (a `.metadata`: a folder is set)
  SpanReader* r_ = nullptr;
  size_t op_pos_ = 0;
  uint8_t op_ = 0;
  std::vector<Value> stack_;
  std::vector<size_t> marks_;
  std::vector<uint64_t> near_bits_;  // referenced memo indices < input size, one bit each
  std::vector<uint64_t> near_rank_;  // set bits in the words before each word
  uint64_t near_count_ = 0;
  std::vector<uint64_t> far_;     // referenced indices >= input size, sorted
  std::vector<Value> memo_vals_;  // one slot per referenced index: near ones by rank, then far
  std::vector<uint8_t> memo_set_;
  uint64_t memo_len_ = 0;
  uint64_t memo_overwrites_ = 0;  // stored memo entries replaced by a later PUT
};

}  // namespace

std::unique_ptr<Tree> parse(ByteSpan data, const ParseOptions& opts) {
  return Machine(data, opts).run();
}

}  // namespace dcpctl::pickle
