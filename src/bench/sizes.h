// Buffer sizes of the bench: read as every SIZE option is (util/size.h), within a bench's own
// limit; lists of them, and their display.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dcpctl::bench {

// The largest size accepted: far beyond any host buffer, small enough that sums of a few sizes
// cannot overflow.
constexpr uint64_t kMaxSize = uint64_t(1) << 44;  // 16 TiB

// parse_size (util/size.h), refusing more than kMaxSize. Throws UsageError naming `what`.
uint64_t parse_buffer_size(const std::string& text, const std::string& what);

// Each item may itself be a comma-separated list; order is kept and repeats are dropped.
std::vector<uint64_t> parse_size_list(const std::vector<std::string>& items, const std::string& what);

// "4 MiB", "1.5 GiB", "512 B": exact binary units where they divide, else one decimal.
std::string format_size(uint64_t bytes);

}  // namespace dcpctl::bench
