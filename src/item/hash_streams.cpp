#include "item/hash_streams.h"

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "store/file.h"
#include "util/crc32.h"
#include "util/error.h"
#include "util/sha256.h"

namespace dcpctl {

uint64_t HashStream::bytes() const {
  uint64_t n = 0;
  for (const HashRun& r : runs) n += r.run.bytes;
  return n;
}

namespace {

// One window of a stream: read into a slot by a reader, then hashed by its lane's hasher.
struct Job {
  size_t stream;
  const HashRun* run;
  uint64_t at, k;    // [at, at + k) of the run's file
  bool first, last;  // the stream's first and last window
  enum State { Reading, Ready, Dropped } state = Reading;
  int slot = -1;
  const uint8_t* data = nullptr;  // Ready: where its bytes landed in the slot
  uint64_t used = 0;              // its bytes hashed so far (a pair hashes the shorter's length)
};

// A hasher's streams, in the order it hashes them. Readers cut the next window where the cursor
// stands (so only the windows in flight exist: at most one a slot, however many chunks the
// checkpoint has) and queue it; the hasher takes the queue's front. A deque keeps references to
// its elements valid while readers push at the back and the hasher pops at the front.
struct Lane {
  std::vector<size_t> streams;
  size_t at_stream = 0, at_run = 0;       // the cursor: the next window starts `done` bytes into
  uint64_t done = 0;                      // run `at_run` of stream `at_stream`
  size_t cut_stream = SIZE_MAX;           // the stream of the last window cut
  std::deque<Job> queue;                  // windows taken by readers and not yet hashed, in order
  uint64_t ahead = 0;                     // their bytes
  std::condition_variable* cv = nullptr;  // its hasher's
  std::optional<Sha256> sha;              // the stream being hashed (the hasher's)
  uint32_t crc = 0;
  bool exhausted() const { return at_stream == streams.size(); }
  bool finished() const { return queue.empty() && exhausted(); }
  bool waiting() const { return !queue.empty() && queue.front().state == Job::Reading; }  // a read in flight
  bool ready() const { return !queue.empty() && queue.front().state != Job::Reading; }
};

// One hash_streams call: the streams dealt to lanes, the slots, and what the readers and the
// hashers share under mu_ (the lanes' cursors and queues, the free slots, the failed streams).
class HashRunner {
 public:
  HashRunner(const std::vector<HashStream>& streams, const HashPipeline& p, MemoryGate& gate)
      : streams_(streams),
        p_(p),
        gate_(gate),
        hashers_(std::max(1u, p.hashers)),
        readers_(std::max(1u, p.readers)),
        slots_(std::max(1u, p.slots)),
        step_(align_down(p.slot_bytes - 2 * kDirectAlign)),
        ways_(Sha256::pairs() ? 2 : 1),
        out_(streams.size()),
        lanes_(hashers_ * ways_),
        hasher_cv_(hashers_),
        failed_(streams.size(), 0) {}

  std::vector<StreamDigest> run() {
    deal();
    GateReservation hold(gate_, uint64_t{slots_} * p_.slot_bytes);
    IoBuffer pool = make_io_buffer(uint64_t{slots_} * p_.slot_bytes);
    pool_ = pool.get();
    for (unsigned i = 0; i < slots_; ++i) free_slots_.push_back(static_cast<int>(i));
    for (Lane& l : lanes_) settle(l);
    std::vector<std::thread> threads;
    try {
      for (unsigned i = 0; i < readers_; ++i) threads.emplace_back([this] { reader(); });
      for (unsigned h = 0; h < hashers_; ++h) threads.emplace_back([this, h] { hasher(&lanes_[h * ways_], ways_); });
    } catch (...) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        halt(std::current_exception());
      }
    }
    for (std::thread& t : threads) t.join();
    if (fatal_) std::rethrow_exception(fatal_);
    return std::move(out_);
  }

 private:
  // The windows a hasher takes at once: the front of each of its lanes that has one in hand.
  struct Taken {
    Lane* ls[2];
    Job* js[2];
    bool hash[2];  // read, and its stream not failed
    size_t m = 0;
  };

  // Largest first, each to the lane with the fewest bytes so far: the lanes end together. Each
  // hasher's lanes: two where Sha256 hashes two streams at once faster than one at a time.
  void deal() {
    std::vector<size_t> order(streams_.size());
    std::vector<uint64_t> bytes(streams_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i, bytes[i] = streams_[i].bytes();
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return bytes[a] > bytes[b]; });
    for (size_t i = 0; i < lanes_.size(); ++i) lanes_[i].cv = &hasher_cv_[i / ways_];
    std::vector<uint64_t> load(lanes_.size(), 0);
    for (size_t si : order) {
      if (bytes[si] == 0) {
        out_[si].hex = Sha256().hex();
        continue;
      }
      const size_t h = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
      lanes_[h].streams.push_back(si);
      load[h] += bytes[si];
    }
  }

  void halt(std::exception_ptr e) {  // under mu_
    if (!fatal_) fatal_ = e;
    stop_ = true;
    readers_cv_.notify_all();
    for (Lane& l : lanes_) l.cv->notify_all();
  }

  // The lane whose hasher has the fewest bytes read ahead, among those with windows left to read.
  Lane* pick() {
    Lane* best = nullptr;
    for (Lane& l : lanes_)
      if (!l.exhausted() && (!best || l.ahead < best->ahead)) best = &l;
    return best;
  }

  // Moves `l`'s cursor to where the next window starts: past runs done or empty, and past
  // streams done or failed (nothing left to check there). After it, exhausted() is true exactly
  // when `l` has no window left to read.
  void settle(Lane& l) {
    for (; !l.exhausted(); ++l.at_stream, l.at_run = 0, l.done = 0) {
      const HashStream& st = streams_[l.streams[l.at_stream]];
      if (failed_[l.streams[l.at_stream]]) continue;
      for (; l.at_run < st.runs.size() && l.done >= st.runs[l.at_run].run.bytes; ++l.at_run) l.done = 0;
      if (l.at_run < st.runs.size()) return;
    }
  }

  // The window at `l`'s cursor, queued: at most `step` bytes, each but a run's last ending on a
  // block of its file (so the next starts on one). Null when none is left.
  Job* cut(Lane& l) {
    settle(l);
    if (l.exhausted()) return nullptr;
    const size_t si = l.streams[l.at_stream];
    const HashRun& r = streams_[si].runs[l.at_run];
    const uint64_t at = r.run.offset + l.done;
    uint64_t k = std::min(step_, r.run.bytes - l.done);
    if (l.done + k < r.run.bytes) k = align_down(at + k) - at;
    const bool first = l.cut_stream != si;
    l.cut_stream = si;
    l.done += k;
    l.queue.push_back(Job{si, &r, at, k, first, false});
    Job& j = l.queue.back();
    settle(l);  // past this window: whether it was its stream's last
    j.last = l.exhausted() || l.streams[l.at_stream] != si;
    return &j;
  }

  void reader() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      Lane* lane = nullptr;
      readers_cv_.wait(lock, [&] { return stop_ || !(lane = pick()) || !free_slots_.empty(); });
      if (stop_ || !lane) return;
      Job* jp = cut(*lane);
      if (!jp) {
        readers_cv_.notify_all();  // this lane is done: another may be picked now
        lane->cv->notify_all();    // and its hasher may be waiting for the end
        continue;
      }
      Job& j = *jp;
      j.slot = free_slots_.back();
      free_slots_.pop_back();
      lane->ahead += j.k;
      lock.unlock();
      const uint8_t* data = nullptr;
      std::exception_ptr err;
      bool error = false;  // an Error: this stream's; anything else stops them all
      try {
        data = read(j);
      } catch (const Error&) {
        err = std::current_exception();
        error = true;
      } catch (...) {
        err = std::current_exception();
      }
      lock.lock();
      if (err && !error) return halt(err);
      if (error) {
        if (!failed_[j.stream]) out_[j.stream].error = err;
        failed_[j.stream] = 1;
        j.state = Job::Dropped;
      } else {
        j.data = data;
        j.state = Job::Ready;
      }
      lane->cv->notify_all();
    }
  }

  // Job j's window read into its slot: where its bytes are.
  const uint8_t* read(const Job& j) {
    uint8_t* buf = pool_ + static_cast<uint64_t>(j.slot) * p_.slot_bytes;
    const std::string& key = streams_[j.stream].key;
    if (j.run->past_cache) return j.run->run.file->read_direct(j.at, j.k, buf, key);
    j.run->run.file->read_at(j.at, buf, j.k, key);
    return buf;
  }

  // A hasher's lanes (one, or two where Sha256 hashes two streams at once faster than one after
  // the other): a window of each at once, as many bytes of both as the shorter has left; alone
  // where the other lane has no window in hand (its read not yet cut: the slots are taken).
  void hasher(Lane* mine, size_t n) {
    for (;;) {
      std::unique_lock<std::mutex> lock(mu_);
      if (!wait_windows(lock, mine, n)) return;
      Taken w = take(mine, n);
      lock.unlock();
      std::string hex[2];
      try {
        digest(w, hex);
      } catch (...) {
        lock.lock();
        return halt(std::current_exception());
      }
      lock.lock();
      retire(w, hex);
      readers_cv_.notify_all();
    }
  }

  // Waits for a window, and for the other lane's read in flight (it ends whatever else happens).
  // False: stop, or every lane is finished.
  bool wait_windows(std::unique_lock<std::mutex>& lock, Lane* mine, size_t n) {
    bool any = false;
    mine[0].cv->wait(lock, [&] {
      bool waiting = false, all_done = true;
      any = false;
      for (size_t i = 0; i < n; ++i) {
        waiting = waiting || mine[i].waiting();
        any = any || mine[i].ready();
        all_done = all_done && mine[i].finished();
      }
      return stop_ || all_done || (any && !waiting);
    });
    return !stop_ && any;
  }

  Taken take(Lane* mine, size_t n) {  // under mu_
    Taken w;
    for (size_t i = 0; i < n; ++i)
      if (mine[i].ready()) {
        w.ls[w.m] = &mine[i];
        w.js[w.m] = &mine[i].queue.front();
        w.hash[w.m] = w.js[w.m]->state == Job::Ready && !failed_[w.js[w.m]->stream];
        ++w.m;
      }
    return w;
  }

  // The windows taken, hashed (outside mu_): a stream's SHA-256 in hex[i] at its last byte.
  void digest(const Taken& w, std::string (&hex)[2]) {
    Lane* const* ls = w.ls;
    Job* const* js = w.js;
    const bool* hash = w.hash;
    const size_t m = w.m;
    for (size_t i = 0; i < m; ++i)
      if (js[i]->first && js[i]->used == 0) ls[i]->sha.emplace(), ls[i]->crc = 0;
    uint64_t k[2] = {js[0]->k - js[0]->used, m > 1 ? js[1]->k - js[1]->used : 0};
    if (m == 2 && hash[0] && hash[1]) {
      k[0] = k[1] = std::min(k[0], k[1]);
      Sha256::update_pair(*ls[0]->sha, js[0]->data + js[0]->used, *ls[1]->sha, js[1]->data + js[1]->used, k[0]);
    } else {
      for (size_t i = 0; i < m; ++i)
        if (hash[i]) ls[i]->sha->update(js[i]->data + js[i]->used, k[i]);
    }
    for (size_t i = 0; i < m; ++i) {
      if (hash[i] && p_.crc) ls[i]->crc = crc32_update(ls[i]->crc, js[i]->data + js[i]->used, k[i]);
      js[i]->used += k[i];
      if (hash[i] && js[i]->last && js[i]->used == js[i]->k) hex[i] = ls[i]->sha->hex();
    }
  }

  // The windows hashed whole leave their lanes' queues and give back their slots (under mu_).
  void retire(const Taken& w, std::string (&hex)[2]) {
    for (size_t i = 0; i < w.m; ++i) {
      Job& j = *w.js[i];
      if (j.used < j.k) continue;
      if (j.last && w.hash[i]) out_[j.stream].hex = std::move(hex[i]), out_[j.stream].crc = w.ls[i]->crc;
      free_slots_.push_back(j.slot);
      w.ls[i]->ahead -= j.k;
      w.ls[i]->queue.pop_front();
    }
  }

  const std::vector<HashStream>& streams_;
  const HashPipeline& p_;
  MemoryGate& gate_;
  const unsigned hashers_, readers_, slots_;
  const uint64_t step_;
  const unsigned ways_;
  std::vector<StreamDigest> out_;
  std::vector<Lane> lanes_;
  std::vector<std::condition_variable> hasher_cv_;
  uint8_t* pool_ = nullptr;
  std::mutex mu_;
  std::condition_variable readers_cv_;  // a slot freed, a job taken, or stop
  std::vector<int> free_slots_;
  std::vector<char> failed_;
  std::exception_ptr fatal_;
  bool stop_ = false;
};

}  // namespace

std::vector<StreamDigest> hash_streams(const std::vector<HashStream>& streams, const HashPipeline& p,
                                       MemoryGate& gate) {
  if (p.slot_bytes <= 2 * kDirectAlign || p.slot_bytes % kDirectAlign)
    throw std::invalid_argument("hash_streams: a slot must hold a read of more than two blocks");
  return HashRunner(streams, p, gate).run();
}

}  // namespace dcpctl
