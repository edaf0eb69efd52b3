# Writes OUT: `std::string FUNC()` (namespace dcpctl) returning the text of file IN. Included by
# src/CMakeLists.txt at configure time (as embed_maps.cmake is), for data compiled in.
file(READ "${IN}" text)
string(FIND "${text}" ")dcpctl_text\"" clash)
if(NOT clash EQUAL -1)
  message(FATAL_ERROR "${IN} holds the raw-string delimiter )dcpctl_text\"")
endif()
file(WRITE "${OUT}.tmp" "// Generated from ${IN} by cmake/embed_text.cmake; do not edit.
#include <string>

namespace dcpctl {
std::string ${FUNC}() {
  return R\"dcpctl_text(${text})dcpctl_text\";
}
}  // namespace dcpctl
")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
