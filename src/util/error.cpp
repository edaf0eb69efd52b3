#include "util/error.h"

#include <cstring>

namespace dcpctl {

std::string Where::describe() const {
  std::string s = file;
  if (offset) {
    if (!s.empty()) s += ": ";
    s += "offset " + std::to_string(*offset);
  }
  if (!key.empty()) {
    if (!s.empty()) s += ": ";
    s += "key '" + key + "'";
  }
  return s;
}

static std::string compose(const Where& w, const std::string& what) {
  std::string loc = w.describe();
  return loc.empty() ? what : loc + ": " + what;
}

Error::Error(Where where, const std::string& what)
    : std::runtime_error(compose(where, what)), where_(std::move(where)), detail_(what) {}

std::string errno_text(int err) {
  return std::strerror(err);
}

}  // namespace dcpctl
