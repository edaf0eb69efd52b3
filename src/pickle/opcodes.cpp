#include "pickle/opcodes.h"

namespace dcpctl::pickle {

const char* op_name(uint8_t op) {
  switch (op) {
    // A list of macro calls, which clang-format 14 re-indents on every pass.
    // clang-format off
#define N(x) \
  case x: return #x;
    N(MARK) N(STOP) N(POP) N(POP_MARK) N(DUP) N(FLOAT) N(INT) N(BININT) N(BININT1) N(LONG)
    N(BININT2) N(NONE) N(PERSID) N(BINPERSID) N(REDUCE) N(STRING) N(BINSTRING)
    N(SHORT_BINSTRING) N(UNICODE) N(BINUNICODE) N(APPEND) N(BUILD) N(GLOBAL) N(DICT)
    N(EMPTY_DICT) N(APPENDS) N(GET) N(BINGET) N(INST) N(LONG_BINGET) N(LIST) N(EMPTY_LIST)
    N(OBJ) N(PUT) N(BINPUT) N(LONG_BINPUT) N(SETITEM) N(TUPLE) N(EMPTY_TUPLE) N(SETITEMS)
    N(BINFLOAT) N(PROTO) N(NEWOBJ) N(EXT1) N(EXT2) N(EXT4) N(TUPLE1) N(TUPLE2) N(TUPLE3)
    N(NEWTRUE) N(NEWFALSE) N(LONG1) N(LONG4) N(BINBYTES) N(SHORT_BINBYTES)
    N(SHORT_BINUNICODE) N(BINUNICODE8) N(BINBYTES8) N(EMPTY_SET) N(ADDITEMS) N(FROZENSET)
    N(NEWOBJ_EX) N(STACK_GLOBAL) N(MEMOIZE) N(FRAME) N(BYTEARRAY8) N(NEXT_BUFFER)
    N(READONLY_BUFFER)
#undef N
    // clang-format on
  }
  return "opcode";
}

}  // namespace dcpctl::pickle
