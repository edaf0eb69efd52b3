// Showing decoded pickle values: a Python-like repr for people, JSON for scripts.
// Both walk the tree with a depth cap, so self-referencing or very deep pickles are safe.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "pickle/value.h"

namespace dcpctl::pickle {

// Python-style repr, cut to about max_chars characters ("..." marks the cut).
std::string repr(const Value& v, size_t max_chars = 200);

// JSON for values JSON can hold exactly (None, bool, int, float, str, lists/tuples, dicts with
// string keys). Returns false (and leaves `out` unspecified) for anything else, and for values
// that expand to more than 4 million JSON values (objects shared through the memo count each time).
bool to_json(const Value& v, nlohmann::json& out);

}  // namespace dcpctl::pickle
