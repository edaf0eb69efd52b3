// libFuzzer target: arbitrary bytes as a GGUF file, through the GGUF module's reader
// (src/gguf/reader.cpp: the header, the keys, the tensor infos, the data's places; a split's
// shards by name). Every input must end in a checkpoint or a dcpctl::Error naming the file; a
// crash, a sanitizer report, a leak, a timeout or an out-of-memory is a bug. The reader takes a
// path (it reads the header through a window, never the whole file), so each input is a memfd.
// Seeds (tests/fuzz/corpus_gguf): files gguf-py's GGUFWriter wrote (tests/fuzz/make_gguf_corpus.py).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "gguf/reader.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dcpctl;
  const int fd = memfd_create("fuzz.gguf", 0);
  if (fd < 0) std::abort();
  for (size_t done = 0; done < size;) {
    ssize_t n = ::write(fd, data + done, size - done);
    if (n <= 0) std::abort();
    done += static_cast<size_t>(n);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  try {
    Checkpoint ck = gguf::open_gguf(path);
    for (const auto& t : ck.md.tensors)
      for (const auto& s : t.storage)
        if (s.offset > size && ck.incomplete.empty()) std::abort();  // data past the end is incomplete
  } catch (const Error& e) {
    if (e.where().file.find("/proc/self/fd/") != 0) std::abort();
  }
  ::close(fd);
  return 0;
}
