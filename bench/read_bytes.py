#!/usr/bin/env python3
"""What a command read: runs it, and before reaping it reads its /proc/PID/io (rchar: bytes read
through read/pread, page cache or not; read_bytes: what reached the block device), with its wall
and CPU time. bench/quantize.sh runs dcpctl's fp8 export under it.

    bench/read_bytes.py CMD [ARG...]      # prints: rchar=N read_bytes=N wall=S cpu=S rc=N (to stderr)
"""
import os
import subprocess
import sys
import time

t0 = time.monotonic()
p = subprocess.Popen(sys.argv[1:])
os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: /proc/PID/io still there
io = {}
with open(f"/proc/{p.pid}/io") as f:
    for line in f:
        k, v = line.split(":")
        io[k] = int(v)
_, status, ru = os.wait4(p.pid, 0)
p.returncode = rc = os.waitstatus_to_exitcode(status)
print(f"rchar={io['rchar']} read_bytes={io['read_bytes']} wall={time.monotonic() - t0:.1f} "
      f"cpu={ru.ru_utime + ru.ru_stime:.1f} rc={rc}", file=sys.stderr)
sys.exit(rc)
