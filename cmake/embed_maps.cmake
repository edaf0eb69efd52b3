# Writes OUT: builtin_key_map_texts() returning every map file of MAPS_DIR (*.json) as
# {file stem, text}. Included by src/CMakeLists.txt at configure time.
file(GLOB MAPS "${MAPS_DIR}/*.json")
list(SORT MAPS)
set(body "")
foreach(f IN LISTS MAPS)
  get_filename_component(stem "${f}" NAME_WE)
  file(READ "${f}" text)
  string(FIND "${text}" ")dcpctl_map\"" clash)
  if(NOT clash EQUAL -1)
    message(FATAL_ERROR "${f} holds the raw-string delimiter )dcpctl_map\"")
  endif()
  string(APPEND body "      {\"${stem}\", R\"dcpctl_map(${text})dcpctl_map\"},\n")
endforeach()
file(WRITE "${OUT}.tmp" "// Generated from src/maps/*.json by cmake/embed_maps.cmake; do not edit.
#include <string>
#include <utility>
#include <vector>

namespace dcpctl {
std::vector<std::pair<std::string, std::string>> builtin_key_map_texts() {
  return {
${body}  };
}
}  // namespace dcpctl
")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
