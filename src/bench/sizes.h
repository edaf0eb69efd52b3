// Byte sizes as users type them on the command line: `4MiB` (binary), `5GB` (decimal, as Hugging
// Face's `max_shard_size` spells it), `1.5GiB`, or a plain number of bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dcpctl::bench {

// The largest size accepted: far beyond any host buffer, small enough that sums of a few sizes
// cannot overflow.
constexpr uint64_t kMaxSize = uint64_t(1) << 44;  // 16 TiB

// Units are case-insensitive: B, KB/MB/GB/TB (powers of 1000), KiB/MiB/GiB/TiB (powers of 1024).
// A fraction must come to a whole number of bytes. Throws UsageError naming `what`.
uint64_t parse_size(const std::string& text, const std::string& what = "size");

// Each item may itself be a comma-separated list; order is kept and repeats are dropped.
std::vector<uint64_t> parse_size_list(const std::vector<std::string>& items, const std::string& what = "size");

// "4 MiB", "1.5 GiB", "512 B": exact binary units where they divide, else one decimal.
std::string format_size(uint64_t bytes);

}  // namespace dcpctl::bench
