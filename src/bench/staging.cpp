#include "bench/staging.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>

#include "bench/pattern.h"
#include "bench/sizes.h"
#include "util/parallel.h"

namespace dcpctl::bench {

const std::vector<std::string> kStagingModes = {"pinned", "registered", "pageable", "cold"};
const std::vector<uint64_t> kDefaultStagingSizes = {uint64_t(4) << 20, uint64_t(64) << 20, uint64_t(256) << 20,
                                                    uint64_t(1) << 30};

size_t StagingReport::count(const std::string& status) const {
  return static_cast<size_t>(std::count_if(rows.begin(), rows.end(), [&](const Row& r) { return r.status == status; }));
}

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// PyTorch's CUDA caching allocator hands out blocks in multiples of 512 bytes, so tensors of a
// state dict start 512-byte aligned; the per-tensor layout does the same on both sides.
constexpr uint64_t kTensorAlign = 512;

// Removes a benchmark file however the measurement ends.
struct Unlinker {
  std::string path;
  ~Unlinker() {
    if (!path.empty()) ::unlink(path.c_str());
  }
};

class Stager {
 public:
  Stager(const StagingOptions& o, StagingReport& r, DeviceSession* dev)
      : o_(o), r_(r), dev_(dev), cuda_host_(r.cuda.usable), threads_(default_threads()) {}

  // The copy source: the device buffer, or (host-only) a pageable host buffer, both holding the
  // pattern from offset 0.
  void prepare(uint64_t span) {
    if (dev_) {
      dev_->prepare_source(span);
    } else if (src_.size() < span) {
      src_.reset();
      src_ = HostBuffer::pageable(span);
      fill_pattern(src_.data(), 0, span, threads_);
    }
  }

  Row mode(const std::string& m, const Layout& l, const std::string& label) {
    Row row = base(m, l, label);
    guarded(row, [&] {
      if (m == "pinned")
        pinned(row, l);
      else if (m == "registered")
        registered(row, l);
      else if (m == "pageable")
        pageable(row, l);
      else
        cold(row, l);
    });
    return row;
  }

  void checkpoint_rows(const RankTensors& rt, const std::string& label) {
    const Layout tensors = packed(rt.sizes, kTensorAlign);
    const Layout flat = contiguous(rt.bytes, 0);
    const uint64_t span = std::max(tensors.span, flat.span);
    prepare(span);
    HostBuffer dst;
    std::string memory;
    try {
      dst = alloc_pinned(span);
      memory = cuda_host_ ? "page-locked (cudaHostAlloc), cached"
                          : "mlock()ed malloc memory, cached (stand-in: no CUDA driver)";
    } catch (const LockError& e) {
      dst = HostBuffer::pageable(span);
      memory = std::string("pageable (malloc): ") + e.what();
    }
    for (const char* m : {"per-tensor", "flat"}) {
      const Layout& l = std::string(m) == "flat" ? flat : tensors;
      progress(std::string(m) + " " + label + " (" + std::to_string(l.segments.size()) + " cop" +
               (l.segments.size() == 1 ? "y" : "ies") + ", " + format_size(l.payload) + ")");
      Row row = base(m, l, label);
      row.memory = memory;
      row.chunk_bytes = 0;
      row.host_bytes = l.span;
      row.host_bytes_locked_between_saves = dst.kind() == HostBuffer::Kind::pageable ? 0 : span;
      // Not gated: async_save queues one copy per tensor and then waits, and the host's time to
      // queue thousands of copies is part of what it costs.
      time_copies(row, dst.data(), l, false);
      r_.rows.push_back(row);
    }
  }

  void write_rows(uint64_t bytes, const std::string& label) {
    const uint8_t* data = staged(bytes);
    for (bool sync : {false, true}) {
      if (sync && !o_.fsync) continue;
      Row row;
      row.mode = sync ? "write-fsync" : "write";
      row.direction = "h2file";
      row.memory = sync ? "file in --write-to, write() + fsync()" : "file in --write-to, write() into the page cache";
      row.label = label;
      row.bytes = bytes;
      row.copies = 1;
      row.timing = "host-clock";
      row.iters = o_.iters;
      row.warmup = o_.warmup;
      row.host_bytes = bytes;
      progress(row.mode + " " + label);
      std::vector<double> t;
      for (unsigned i = 0; i < o_.warmup + o_.iters; ++i) {
        Unlinker file{o_.write_to + "/.dcpctl-bench-" + std::to_string(::getpid()) + "-" + std::to_string(files_++) +
                      ".tmp"};
        const double s = timed_file_write(file.path, data, bytes, sync);
        if (i >= o_.warmup) t.push_back(s);
        if (i + 1 == o_.warmup + o_.iters) {
          const uint64_t m = file_pattern_mismatch(file.path, bytes);
          row.verified = m == bytes;
          if (m != bytes) {
            row.status = "failed";
            row.reason = "the file read back differs from the staged bytes at byte " + std::to_string(m);
          }
        }
      }
      row.seconds = summarize(t);
      r_.rows.push_back(row);
    }
  }

  void progress(const std::string& what) const {
    if (o_.progress) o_.progress("bench staging: " + what);
  }

 private:
  Row base(const std::string& m, const Layout& l, const std::string& label) const {
    Row row;
    row.mode = m;
    row.direction = dev_ ? "d2h" : "h2h";
    row.label = label;
    row.bytes = l.payload;
    row.copies = l.segments.size();
    row.streams = o_.streams;
    row.chunk_bytes = l.segments.size() > 1 ? l.segments.front().bytes : 0;
    row.iters = o_.iters;
    row.warmup = o_.warmup;
    row.host_bytes = l.span;
    return row;
  }

  template <class F>
  void guarded(Row& row, F&& body) {
    try {
      body();
    } catch (const LockError& e) {
      row.status = "skipped";
      row.reason = e.what();
      row.verified.reset();
      row.seconds = Summary{};
      row.pin_seconds.reset();
    }
  }

  // Page-locked memory as this machine can have it: CUDA's, or mlock()ed as the stand-in.
  HostBuffer alloc_pinned(uint64_t bytes) {
    return cuda_host_ ? HostBuffer::cuda_pinned(bytes) : HostBuffer::mlocked(bytes);
  }
  void pin_in_place(HostBuffer& b) {
    if (cuda_host_)
      b.register_cuda();
    else
      b.lock();
  }

  bool gate(const Layout& l, Row& row) const {
    if (!dev_) return false;
    if (l.segments.size() <= DeviceSession::kMaxGatedCopies) return true;
    row.reason = "more than " + std::to_string(DeviceSession::kMaxGatedCopies) +
                 " copies per iteration: timed on the host clock without the gate";
    return false;
  }

  double copy(uint8_t* dst, const Layout& l, bool gated) {
    return dev_ ? dev_->copy(dst, l.segments, gated) : host_copy(dst, src_.data(), l.segments, o_.streams);
  }

  // Warm-up, then clear the destination, then the timed iterations, then check the bytes.
  void time_copies(Row& row, uint8_t* dst, const Layout& l, bool gated) {
    for (unsigned i = 0; i < o_.warmup; ++i) copy(dst, l, gated);
    std::memset(dst, 0, l.span);
    std::vector<double> t;
    bool timed_out = false;
    for (unsigned i = 0; i < o_.iters; ++i) {
      t.push_back(copy(dst, l, gated));
      timed_out = timed_out || (gated && dev_->gate_timed_out());
    }
    row.seconds = summarize(t);
    row.timing = gated ? "cuda-events" : "host-clock";
    if (timed_out) row.reason = "the gate opened by its timeout: the times include queuing the copies";
    check(row, dst, l);
  }

  void check(Row& row, const uint8_t* dst, const Layout& l) const {
    for (const Segment& s : l.segments) {
      const uint64_t m = find_mismatch(dst + s.offset, s.offset, s.bytes, threads_);
      if (m != s.bytes) {
        row.verified = false;
        row.status = "failed";
        row.reason = "wrong bytes: destination byte " + std::to_string(s.offset + m) + " differs from the source";
        return;
      }
    }
    row.verified = true;
  }

  void pinned(Row& row, const Layout& l) {
    row.memory = cuda_host_ ? "page-locked (cudaHostAlloc), cached"
                            : "mlock()ed malloc memory, cached (stand-in: no CUDA driver)";
    const auto t0 = Clock::now();
    HostBuffer dst = alloc_pinned(l.span);
    row.pin_seconds = summarize({since(t0)});  // once: the buffer is then reused by every save
    row.host_bytes_locked_between_saves = l.span;
    time_copies(row, dst.data(), l, gate(l, row));
  }

  void registered(Row& row, const Layout& l) {
    row.memory = cuda_host_
                     ? "malloc memory pinned in place (cudaHostRegister), cached"
                     : "malloc memory mlock()ed in place, cached (stand-in for cudaHostRegister: no CUDA driver)";
    HostBuffer buf = HostBuffer::pageable(l.span);
    std::memset(buf.data(), 0, l.span);  // existing memory, as a shared-memory segment would be
    std::vector<double> pin;
    for (unsigned i = 0; i < o_.iters; ++i) {
      const auto t0 = Clock::now();
      pin_in_place(buf);
      pin.push_back(since(t0));
      buf.unpin();
    }
    row.pin_seconds = summarize(pin);
    row.host_bytes_locked_between_saves = l.span;
    pin_in_place(buf);
    time_copies(row, buf.data(), l, gate(l, row));
    buf.unpin();
  }

  void pageable(Row& row, const Layout& l) {
    row.memory = "pageable (malloc), reused";
    HostBuffer dst = HostBuffer::pageable(l.span);
    // A device-to-pageable copy returns only when it is done, so it cannot wait behind a gate.
    time_copies(row, dst.data(), l, false);
  }

  void cold(Row& row, const Layout& l) {
    row.memory = cuda_host_ ? "page-locked, cudaHostAlloc + cudaFreeHost every save"
                            : "mlock()ed malloc memory, allocated and locked every save (stand-in: no CUDA driver)";
    std::vector<double> total, pin;
    const unsigned n = o_.warmup + o_.iters;
    for (unsigned i = 0; i < n; ++i) {
      const auto t0 = Clock::now();
      HostBuffer dst = alloc_pinned(l.span);
      const double p = since(t0);
      // Recycled heap memory may still hold the last iteration's bytes: clear it (untimed) so
      // that the check below sees this iteration's copy.
      std::memset(dst.data(), 0, l.span);
      const double c = copy(dst.data(), l, false);
      if (i >= o_.warmup) {
        total.push_back(p + c);
        pin.push_back(p);
      }
      if (i + 1 == n) check(row, dst.data(), l);
    }
    row.seconds = summarize(total);
    row.pin_seconds = summarize(pin);
    row.timing = "host-clock";
  }

  // The staged bytes that the write leg writes: the pattern, in host memory.
  const uint8_t* staged(uint64_t bytes) {
    if (!dev_) {
      prepare(bytes);
      return src_.data();
    }
    if (staged_.size() < bytes) {
      staged_.reset();
      staged_ = HostBuffer::pageable(bytes);
      fill_pattern(staged_.data(), 0, bytes, threads_);
    }
    return staged_.data();
  }

  const StagingOptions& o_;
  StagingReport& r_;
  DeviceSession* dev_;
  bool cuda_host_;
  unsigned threads_;
  HostBuffer src_, staged_;
  uint64_t files_ = 0;
};

std::string no_gpu_message(const CudaProbe& p) {
  const std::string what = p.compiled ? "no usable CUDA device: " + p.reason : p.reason;
  return "bench staging needs a GPU, but " + what + "; --host-only measures the host side alone";
}

void check_options(const StagingOptions& o) {
  if (o.iters == 0) throw UsageError(Where(), "--iters must be at least 1");
  if (o.streams == 0 || o.streams > 64) throw UsageError(Where(), "--streams must be between 1 and 64");
  if (o.sizes.empty() && o.checkpoint.empty())
    throw UsageError(Where(), "nothing to measure: give --sizes or --from-checkpoint");
  for (const std::string& m : o.modes)
    if (std::find(kStagingModes.begin(), kStagingModes.end(), m) == kStagingModes.end())
      throw UsageError(Where(), "unknown mode '" + m + "' (modes: pinned, registered, pageable, cold)");
  if (o.fsync && o.write_to.empty()) throw UsageError(Where(), "--fsync needs --write-to DIR");
  if (!o.write_to.empty()) {
    struct stat st {};
    if (::stat(o.write_to.c_str(), &st) != 0) {
      int err = errno;
      throw IoError(Where(o.write_to), "--write-to: " + errno_text(err));
    }
    if (!S_ISDIR(st.st_mode)) throw IoError(Where(o.write_to), "--write-to: not a directory");
    if (::access(o.write_to.c_str(), W_OK) != 0) {
      int err = errno;
      throw IoError(Where(o.write_to), "--write-to: cannot write here: " + errno_text(err));
    }
  }
}

void add_notes(StagingReport& r) {
  auto& n = r.notes;
  if (r.host_only) {
    if (r.cuda.usable)
      n.push_back("--host-only: copies are host memcpy into CUDA page-locked memory; no device copies were made.");
    else
      n.push_back("No usable CUDA device here: " + r.cuda.reason +
                  ". So 'pinned', 'registered' and 'cold' use mlock()ed memory as a stand-in for page-locked memory, "
                  "and every copy is a host memcpy, so the rates are host memory bandwidth, not PCIe.");
  } else {
    n.push_back(
        "Copies into page-locked memory wait behind a gate until all are queued and are timed with CUDA events "
        "(nvbandwidth's method); pageable, cold, per-tensor and flat copies are timed with the host clock from "
        "the first queued copy until the streams finish, as a training step waits for them.");
  }
  uint64_t locked = 0;
  for (const Row& row : r.rows)
    if (row.status == "ok") locked = std::max(locked, row.host_bytes_locked_between_saves);
  if (locked)
    n.push_back("Host RAM: a cached pinned or registered buffer stays locked in RAM for the whole job (" +
                format_size(locked) +
                " for the largest size here, per rank); 'cold' locks it only during a save but pays the pinning cost "
                "(PIN column) every time.");
  if (r.count("skipped") && r.host.memlock_limit && !r.host.memlock_exempt)
    n.push_back("Some measurements were skipped: mlock() is limited to " + format_size(*r.host.memlock_limit) +
                " here (RLIMIT_MEMLOCK); `ulimit -l unlimited` lifts it.");
  if (r.checkpoint)
    n.push_back(
        "Checkpoint: rank " + std::to_string(r.checkpoint->rank) + " wrote " + std::to_string(r.checkpoint->chunks) +
        " tensor chunks (" + std::to_string(r.checkpoint->tensors) + " tensors, " + format_size(r.checkpoint->bytes) +
        "). DCP saves replicated tensors from one rank only, so a rank's async_save may stage more than it wrote.");
}

}  // namespace

StagingReport run_staging(const StagingOptions& o) {
  check_options(o);
  StagingReport r;
  r.sizes = o.sizes;
  for (const std::string& m : kStagingModes)
    if (o.modes.empty() || std::find(o.modes.begin(), o.modes.end(), m) != o.modes.end()) r.modes.push_back(m);
  if (r.sizes.empty()) r.modes.clear();
  r.iters = o.iters;
  r.warmup = o.warmup;
  r.streams = o.streams;
  r.chunk = o.chunk;
  r.host_only = o.host_only;
  r.write_to = o.write_to;
  r.fsync = o.fsync;
  r.host = host_info();
  r.cuda = cuda_probe();
  r.pinned_memory = r.cuda.usable ? "cudaHostAlloc" : "mlock";
  if (!o.host_only && !r.cuda.usable) throw UnsupportedError(Where(), no_gpu_message(r.cuda));

  std::optional<RankTensors> rt;
  if (!o.checkpoint.empty()) {
    rt = rank_tensors(o.checkpoint, o.rank);
    CheckpointSource c;
    c.path = o.checkpoint;
    c.rank = o.rank;
    c.chunks = rt->sizes.size();
    c.tensors = rt->tensors;
    c.bytes = rt->bytes;
    c.span = packed(rt->sizes, kTensorAlign).span;
    c.ranks = rt->ranks;
    r.checkpoint = c;
  }

  std::unique_ptr<DeviceSession> dev;
  if (!o.host_only) {
    dev = std::make_unique<DeviceSession>(o.device, o.streams);
    r.device = dev->info();
    r.pcie = read_pcie_link(r.device->pci_bus_id);
  }

  Stager st(o, r, dev.get());
  for (uint64_t size : r.sizes) {
    // --streams without --chunk: one piece per stream, page-aligned.
    uint64_t chunk = o.chunk;
    if (!chunk && o.streams > 1) chunk = ((size + o.streams - 1) / o.streams + 4095) / 4096 * 4096;
    const Layout l = contiguous(size, chunk);
    const std::string label = format_size(size);
    st.prepare(size);
    for (const std::string& m : r.modes) {
      st.progress(m + " " + label);
      r.rows.push_back(st.mode(m, l, label));
    }
    if (!o.write_to.empty()) st.write_rows(size, label);
  }
  if (rt) {
    const std::string label = "rank " + std::to_string(o.rank);
    st.checkpoint_rows(*rt, label);
    if (!o.write_to.empty()) st.write_rows(rt->bytes, label);
  }
  add_notes(r);
  return r;
}

}  // namespace dcpctl::bench
