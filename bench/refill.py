"""Touches N bytes of fresh anonymous memory, then frees it: run right before a timed command on a
VM with free page reporting (bench/common.sh's drop_cache), so that the memory the command is
about to take is backed by the host again, as it is on a machine that is not a VM.

    refill.py BYTES

(virtio-balloon's free page reporting hands memory that stayed free for about 2 s back to the
host; the next allocation of it waits while the host faults it in again. On this project's VM a
`cat` of 2.4 GB took 0.69 s right after the page cache was dropped and 2.4-3.3 s five to ten
seconds later, the difference all system time: whichever command followed a quiet one paid.)
Huge pages where the kernel gives them (one fault per 2 MiB, the reporting's own unit)."""

import mmap
import sys
import time

n = int(sys.argv[1])
t = time.monotonic()
m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
if hasattr(mmap, "MADV_HUGEPAGE"):
    m.madvise(mmap.MADV_HUGEPAGE)
for off in range(0, n, 4096):
    m[off] = 1
m.close()
print(f"refilled {n / 2**30:.1f} GiB in {time.monotonic() - t:.1f} s", file=sys.stderr)
