// How the library's errors reach Python: each class of util/error.h becomes the exception class of
// dcpctl/_errors.py for its exit code (DamagedCheckpoint for 3, Unsupported for 5, ...), carrying
// the message the command line prints after "dcpctl: error: " and the file, offset and key.
#pragma once

namespace dcpctl::py {

// Registers the translator (module import time).
void register_errors();

}  // namespace dcpctl::py
