#include "item/hash_streams.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "store/file.h"
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
  uint64_t at, k;     // [at, at + k) of the run's file
  bool first, last;   // the stream's first and last window
  enum State { Waiting, Reading, Ready, Dropped } state = Waiting;
  int slot = -1;
  const uint8_t* data = nullptr;  // Ready: where its bytes landed in the slot
};

// A hasher's streams, as the windows it hashes in order; readers take them in the same order.
struct Lane {
  std::vector<Job> jobs;
  size_t next_read = 0;  // the first job no reader has taken
  uint64_t ahead = 0;    // bytes taken by readers and not yet hashed
  std::condition_variable cv;
};

// The windows of `s` (index `si`) onto `lane`: `step` bytes at most, each after a run's first
// ending on a block of its file (so the next starts on one).
void add_windows(Lane& lane, size_t si, const HashStream& s, uint64_t step) {
  const size_t first = lane.jobs.size();
  for (const HashRun& r : s.runs) {
    for (uint64_t done = 0; done < r.run.bytes;) {
      const uint64_t at = r.run.offset + done;
      uint64_t k = std::min(step, r.run.bytes - done);
      if (done + k < r.run.bytes) k = align_down(at + k) - at;
      lane.jobs.push_back(Job{si, &r, at, k, false, false});
      done += k;
    }
  }
  if (lane.jobs.size() > first) {
    lane.jobs[first].first = true;
    lane.jobs.back().last = true;
  }
}

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
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return streams[a].bytes() > streams[b].bytes(); });
  std::vector<Lane> lanes(hashers);
  std::vector<uint64_t> load(hashers, 0);
  for (size_t si : order) {
    if (streams[si].bytes() == 0) {
      out[si].hex = Sha256().hex();
      continue;
    }
    const size_t h = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    add_windows(lanes[h], si, streams[si], step);
    load[h] += streams[si].bytes();
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
    for (Lane& l : lanes) l.cv.notify_all();
  };
  // The lane whose hasher has the fewest bytes read ahead, among those with windows left to read.
  auto pick = [&]() -> Lane* {
    Lane* best = nullptr;
    for (Lane& l : lanes)
      if (l.next_read < l.jobs.size() && (!best || l.ahead < best->ahead)) best = &l;
    return best;
  };

  auto reader = [&] {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      Lane* lane = nullptr;
      readers_cv.wait(lock, [&] { return stop || !(lane = pick()) || !free_slots.empty(); });
      if (stop || !lane) return;
      Job& j = lane->jobs[lane->next_read++];
      if (failed[j.stream]) {  // an earlier window of its stream failed: nothing left to check there
        j.state = Job::Dropped;
        lane->cv.notify_all();
        continue;
      }
      j.slot = free_slots.back();
      free_slots.pop_back();
      j.state = Job::Reading;
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
        free_slots.push_back(j.slot);
        lane->ahead -= j.k;
        readers_cv.notify_all();
      } else {
        j.data = data;
        j.state = Job::Ready;
      }
      lane->cv.notify_all();
    }
  };

  auto hasher = [&](Lane& lane) {
    std::optional<Sha256> sha;
    for (Job& j : lane.jobs) {
      std::unique_lock<std::mutex> lock(mu);
      lane.cv.wait(lock, [&] { return stop || j.state == Job::Ready || j.state == Job::Dropped; });
      if (stop) return;
      const bool hash = j.state == Job::Ready && !failed[j.stream];
      lock.unlock();
      std::string hex;
      try {
        if (j.first) sha.emplace();
        if (hash) sha->update(j.data, j.k);
        if (hash && j.last) hex = sha->hex();
      } catch (...) {
        lock.lock();
        return halt(std::current_exception());
      }
      lock.lock();
      if (j.state == Job::Ready) {
        free_slots.push_back(j.slot);
        lane.ahead -= j.k;
        readers_cv.notify_all();
      }
      if (j.last && hash) out[j.stream].hex = std::move(hex);
    }
  };

  std::vector<std::thread> threads;
  try {
    for (unsigned i = 0; i < readers; ++i) threads.emplace_back(reader);
    for (Lane& l : lanes) threads.emplace_back(hasher, std::ref(l));
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
