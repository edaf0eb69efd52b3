// The zip records of a torch.save archive (PKWARE APPNOTE 6.3): their signatures and fixed sizes,
// shared by the reader (item/zip_directory) and the writer (write/torch_zip_writer).
#pragma once

#include <cstdint>

namespace dcpctl::zip {

inline constexpr uint32_t kLocalSig = 0x04034b50;       // local file header
inline constexpr uint32_t kDescriptorSig = 0x08074b50;  // data descriptor (after a record's bytes)
inline constexpr uint32_t kCentralSig = 0x02014b50;     // central directory header
inline constexpr uint32_t kEndSig = 0x06054b50;         // end of central directory record
inline constexpr uint32_t kEnd64Sig = 0x06064b50;       // zip64 end of central directory record
inline constexpr uint32_t kLocator64Sig = 0x07064b50;   // zip64 end of central directory locator

// Fixed parts, before any name, extra field or comment.
inline constexpr uint64_t kLocal = 30, kCentral = 46, kEnd = 22, kLocator64 = 20, kEnd64 = 56;

}  // namespace dcpctl::zip
