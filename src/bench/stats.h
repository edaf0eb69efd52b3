// Statistics over repeated timings, the way nvbandwidth reports them: the median is the number
// to quote (robust to one slow iteration), min and max show the spread. Rates are decimal GB/s
// (10^9 bytes per second), the unit PCIe bandwidth and nvbandwidth use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace dcpctl::bench {

struct Summary {
  size_t n = 0;  // 0: nothing measured; the other fields are then 0
  double median = 0, min = 0, max = 0, mean = 0;
};

// Median of an even count is the mean of the two middle samples. Samples are seconds (or any
// unit); negative or non-finite samples are a caller bug and throw std::invalid_argument.
Summary summarize(std::vector<double> samples);

// bytes / seconds / 1e9; nullopt when seconds is not positive (nothing to divide by).
std::optional<double> gb_per_s(uint64_t bytes, double seconds);

// Rates from a time summary: the median rate is bytes over the median time, the lowest rate
// comes from the slowest iteration and the highest from the fastest.
struct RateSummary {
  std::optional<double> median, min, max;
};
RateSummary rates(uint64_t bytes, const Summary& seconds);

// Seconds per GiB (2^30 bytes) of a cost that grows with size, such as pinning memory.
std::optional<double> seconds_per_gib(uint64_t bytes, double seconds);

}  // namespace dcpctl::bench
