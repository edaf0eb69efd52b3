// CRC-32 as zip archives store it (IEEE 802.3, reflected, init and final xor 0xFFFFFFFF), for the
// torch.save blobs dcpctl writes from file ranges (write/torch_save.h) and the records it reads
// (util/crc_ledger.h). On x86-64, by carry-less multiplication where the CPU has it (checked at run
// time): with VPCLMULQDQ on 256-bit registers, 128 bytes per step (Intel from Ice Lake, AMD from
// Zen 3; about 1.7-3x PCLMULQDQ's speed here); with PCLMULQDQ, 64; elsewhere, and for the last
// bytes, zlib's crc32_z. bench/crc32.sh measures them against zlib on 256 MiB: on this project's
// AMD EPYC VM, zlib 1.2.13 1.80 GB/s, VPCLMULQDQ 6.60, PCLMULQDQ 5.06 (medians of 7), so the folds
// stay; the slicing-by-8 tables that were the fallback did 1.29, so zlib took their place.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dcpctl {

// crc32_update(0, p, n) is the CRC of [p, p + n); feeding a buffer in pieces gives the same value.
uint32_t crc32_update(uint32_t crc, const void* data, size_t n);

// The implementations, narrowest first; crc32_update takes the widest this CPU runs.
enum class Crc32Path { Zlib, Clmul, Vclmul };
Crc32Path crc32_best_path();
// crc32_update through `path`, or the widest this CPU runs if that is narrower (the tests hold
// every path to the definition).
uint32_t crc32_update_via(Crc32Path path, uint32_t crc, const void* data, size_t n);

}  // namespace dcpctl
