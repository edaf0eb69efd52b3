// Byte sizes as users type them on the command line, read by one set of rules for every option
// that takes a SIZE (--max-memory, --max-shard-size, bench --sizes and --chunk): `5GB` (decimal,
// as Hugging Face's `max_shard_size` spells it), `4GiB` (binary), `1.5GiB`, or a number of bytes.
#pragma once

#include <cstdint>
#include <string>

namespace dcpctl {

// Units are case-insensitive: B, KB/MB/GB/TB (powers of 1000), KiB/MiB/GiB/TiB (powers of 1024).
// A bare K, M, G or T is refused: it would be read as 1000 by some tools and 1024 by others.
// Blanks around the number and before the unit are ignored. The number is decimal (no sign, no
// exponent); fractions of a byte are dropped ("2.5" is 2 bytes), but a size of less than one byte
// is refused ("0", "0.5", "0.1B"): the options take 0 for "automatic", a typo must not turn into
// that. Throws UsageError naming `what` (the option) and the text.
uint64_t parse_size(const std::string& text, const std::string& what);

}  // namespace dcpctl
