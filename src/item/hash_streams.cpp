#include "item/hash_streams.h"

#include <algorithm>
#include <cstdint>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "store/file.h"
#include "util/error.h"
#include "util/crc32.h"
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
  size_t at_stream = 0, at_run = 0;  // the cursor: the next window starts `done` bytes into
  uint64_t done = 0;                 // run `at_run` of stream `at_stream`
  size_t cut_stream = SIZE_MAX;      // the stream of the last window cut
  std::deque<Job> queue;             // windows taken by readers and not yet hashed, in order
  uint64_t ahead = 0;                // their bytes
  std::condition_variable* cv = nullptr;  // its hasher's
  std::optional<Sha256> sha;  // the stream being hashed (the hasher's)
  uint32_t crc = 0;
  bool exhausted() const { return at_stream == streams.size(); }
  bool finished() const { return queue.empty() && exhausted(); }
  bool waiting() const { return !queue.empty() && queue.front().state == Job::Reading; }  // a read in flight
  bool ready() const { return !queue.empty() && queue.front().state != Job::Reading; }
};

}  // namespace

std::vector<StreamDigest> hash_streams(const std::vector<HashStream>& streams, const HashPipeline& p, MemoryGate& gate) {
  std::vector<StreamDigest> out(streams.size());
  const unsigned hashers = std::max(1u, p.hashers), readers = std::max(1u, p.readers);
  const unsigned slots = std::max(1u, p.slots);
  if (p.slot_bytes <= 2 * kDirectAlign || p.slot_bytes % kDirectAlign)
    throw std::invalid_argument("hash_streams: a slot must hold a read of more than two blocks");
  const uint64_t step = align_down(p.slot_bytes - 2 * kDirectAlign);

  // Largest first, each to the lane with the fewest bytes so far: the lanes end together.
  std::vector<size_t> order(streams.size());
  std::vector<uint64_t> bytes(streams.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i, bytes[i] = streams[i].bytes();
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return bytes[a] > bytes[b]; });
  // Each hasher's lanes: two where Sha256 hashes two streams at once faster than one at a time.
  const unsigned ways = Sha256::pairs() ? 2 : 1;
  std::vector<Lane> lanes(hashers * ways);
  std::vector<std::condition_variable> hasher_cv(hashers);
  for (size_t i = 0; i < lanes.size(); ++i) lanes[i].cv = &hasher_cv[i / ways];
  std::vector<uint64_t> load(lanes.size(), 0);
  for (size_t si : order) {
    if (bytes[si] == 0) {
      out[si].hex = Sha256().hex();
      continue;
    }
    const size_t h = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    lanes[h].streams.push_back(si);
    load[h] += bytes[si];
  }

  GateReservation hold(gate, uint64_t{slots} * p.slot_bytes);
  IoBuffer pool = make_io_buffer(uint64_t{slots} * p.slot_bytes);
  std::vector<int> free_slots;
  for (unsigned i = 0; i < slots; ++i) free_slots.push_back(static_cast<int>(i));

  std::mutex mu;
  std::condition_variable readers_cv;  // a slot freed, a job taken, or stop
  std::vector<char> failed(streams.size(), 0);
  std::exception_ptr fatal;
  bool stop = false;
  auto halt = [&](std::exception_ptr e) {  // under mu
    if (!fatal) fatal = e;
    stop = true;
    readers_cv.notify_all();
    for (Lane& l : lanes) l.cv->notify_all();
  };
  // The lane whose hasher has the fewest bytes read ahead, among those with windows left to read.
  auto pick = [&]() -> Lane* {
    Lane* best = nullptr;
    for (Lane& l : lanes)
      if (!l.exhausted() && (!best || l.ahead < best->ahead)) best = &l;
    return best;
  };
  // Moves `l`'s cursor to where the next window starts: past runs done or empty, and past
  // streams done or failed (nothing left to check there). After it, exhausted() is true exactly
  // when `l` has no window left to read.
  auto settle = [&](Lane& l) {
    for (; !l.exhausted(); ++l.at_stream, l.at_run = 0, l.done = 0) {
      const HashStream& st = streams[l.streams[l.at_stream]];
      if (failed[l.streams[l.at_stream]]) continue;
      for (; l.at_run < st.runs.size() && l.done >= st.runs[l.at_run].run.bytes; ++l.at_run) l.done = 0;
      if (l.at_run < st.runs.size()) return;
    }
  };
  // The window at `l`'s cursor, queued: at most `step` bytes, each but a run's last ending on a
  // block of its file (so the next starts on one). Null when none is left.
  auto cut = [&](Lane& l) -> Job* {
    settle(l);
    if (l.exhausted()) return nullptr;
    const size_t si = l.streams[l.at_stream];
    const HashRun& r = streams[si].runs[l.at_run];
    const uint64_t at = r.run.offset + l.done;
    uint64_t k = std::min(step, r.run.bytes - l.done);
    if (l.done + k < r.run.bytes) k = align_down(at + k) - at;
    const bool first = l.cut_stream != si;
    l.cut_stream = si;
    l.done += k;
    l.queue.push_back(Job{si, &r, at, k, first, false});
    Job& j = l.queue.back();
    settle(l);  // past this window: whether it was its stream's last
    j.last = l.exhausted() || l.streams[l.at_stream] != si;
    return &j;
  };

  for (Lane& l : lanes) settle(l);

  auto reader = [&] {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      Lane* lane = nullptr;
      readers_cv.wait(lock, [&] { return stop || !(lane = pick()) || !free_slots.empty(); });
      if (stop || !lane) return;
      Job* jp = cut(*lane);
      if (!jp) {
        readers_cv.notify_all();  // this lane is done: another may be picked now
        lane->cv->notify_all();    // and its hasher may be waiting for the end
        continue;
      }
      Job& j = *jp;
      j.slot = free_slots.back();
      free_slots.pop_back();
      lane->ahead += j.k;
      lock.unlock();
      const uint8_t* data = nullptr;
      std::exception_ptr err;
      bool error = false;
      try {
        uint8_t* buf = pool.get() + static_cast<uint64_t>(j.slot) * p.slot_bytes;
        const std::string& key = streams[j.stream].key;
        if (j.run->past_cache) {
          data = j.run->run.file->read_direct(j.at, j.k, buf, key);
        } else {
          j.run->run.file->read_at(j.at, buf, j.k, key);
          data = buf;
        }
      } catch (const Error&) {
        err = std::current_exception();
        error = true;
      } catch (...) {
        err = std::current_exception();
      }
      lock.lock();
      if (err && !error) return halt(err);
      if (error) {
        if (!failed[j.stream]) out[j.stream].error = err;
        failed[j.stream] = 1;
        j.state = Job::Dropped;
      } else {
        j.data = data;
        j.state = Job::Ready;
      }
      lane->cv->notify_all();
    }
  };

  // A hasher's lanes (one, or two where Sha256 hashes two streams at once faster than one after
  // the other): a window of each at once, as many bytes of both as the shorter has left; alone
  // where the other lane has no window in hand (its read not yet cut: the slots are taken).
  auto hasher = [&](Lane* mine, size_t n) {
    for (;;) {
      std::unique_lock<std::mutex> lock(mu);
      // Wait for a window, and for the other lane's read in flight (it ends whatever else happens).
      bool any = false;
      mine[0].cv->wait(lock, [&] {
        bool waiting = false, all_done = true;
        any = false;
        for (size_t i = 0; i < n; ++i) {
          waiting = waiting || mine[i].waiting();
          any = any || mine[i].ready();
          all_done = all_done && mine[i].finished();
        }
        return stop || all_done || (any && !waiting);
      });
      if (stop || !any) return;
      Lane* ls[2];
      Job* js[2];
      bool hash[2];
      size_t m = 0;
      for (size_t i = 0; i < n; ++i)
        if (mine[i].ready()) {
          ls[m] = &mine[i];
          js[m] = &mine[i].queue.front();
          hash[m] = js[m]->state == Job::Ready && !failed[js[m]->stream];
          ++m;
        }
      lock.unlock();
      std::string hex[2];
      try {
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
          if (hash[i] && p.crc) ls[i]->crc = crc32_update(ls[i]->crc, js[i]->data + js[i]->used, k[i]);
          js[i]->used += k[i];
          if (hash[i] && js[i]->last && js[i]->used == js[i]->k) hex[i] = ls[i]->sha->hex();
        }
      } catch (...) {
        lock.lock();
        return halt(std::current_exception());
      }
      lock.lock();
      for (size_t i = 0; i < m; ++i) {
        Job& j = *js[i];
        if (j.used < j.k) continue;
        if (j.last && hash[i]) out[j.stream].hex = std::move(hex[i]), out[j.stream].crc = ls[i]->crc;
        free_slots.push_back(j.slot);
        ls[i]->ahead -= j.k;
        ls[i]->queue.pop_front();
      }
      readers_cv.notify_all();
    }
  };

  std::vector<std::thread> threads;
  try {
    for (unsigned i = 0; i < readers; ++i) threads.emplace_back(reader);
    for (unsigned h = 0; h < hashers; ++h) threads.emplace_back(hasher, &lanes[h * ways], size_t{ways});
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mu);
      halt(std::current_exception());
    }
  }
  for (std::thread& t : threads) t.join();
  if (fatal) std::rethrow_exception(fatal);
  return out;
}

}  // namespace dcpctl
