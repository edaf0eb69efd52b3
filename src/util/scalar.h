// DCPCTL_SCALAR=1 (any value but "" and "0") in the environment, read once: the encoders that
// have vector paths chosen by the CPU (gguf/simd.h: GGUF's F16, BF16, Q8_0 and K-quant fits;
// view/kernels.h: --quantize's group maxima, divisions and 4-bit packing) take their scalar paths.
// Those are always compiled, the only ones on other CPUs, and give the same bytes: the tests run
// both (unit:scalar-paths).
#pragma once

#include <cstdlib>
#include <cstring>

namespace dcpctl {

inline bool scalar_forced() {
  static const bool forced = [] {
    const char* v = std::getenv("DCPCTL_SCALAR");
    return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
  }();
  return forced;
}

}  // namespace dcpctl
