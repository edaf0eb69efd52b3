// CRC-32 as zip archives store it (IEEE 802.3, reflected, init and final xor 0xFFFFFFFF), for the
// torch.save blobs dcpctl writes from file ranges (write/torch_save.h) and checksums. On x86-64
// with PCLMULQDQ (checked at run time) by carry-less multiplication, 64 bytes per step; elsewhere,
// and for the last bytes, slicing-by-8 (eight 256-entry tables).
#pragma once

#include <cstddef>
#include <cstdint>

namespace dcpctl {

// crc32_update(0, p, n) is the CRC of [p, p + n); feeding a buffer in pieces gives the same value.
uint32_t crc32_update(uint32_t crc, const void* data, size_t n);

}  // namespace dcpctl
