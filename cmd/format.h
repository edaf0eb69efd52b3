// Small formatting helpers shared by the human renderers of the subcommands.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dcpctl::cli {

std::string human_bytes(uint64_t n);                  // "1.5 MiB", "512 B"
std::string dims_str(const std::vector<int64_t>& d);  // "[4, 5]"
std::string pad(const std::string& s, size_t width);  // left-aligned, at least one space after
// Adds `s3: {bytes_fetched, requests, retries}` (and bytes_uploaded, beside an s3:// output's part plan) to a --json
// document when this process read from (or wrote to) object storage; nothing otherwise.
void add_s3_transfer(nlohmann::json& doc);

// What a write transformed, on stderr: the dequantized weights (`dequantized`), the --map summary
// (`map`); one line each, nothing without them.
void print_map_summary(const nlohmann::json& summary);

}  // namespace dcpctl::cli
