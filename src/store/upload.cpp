#include "store/upload.h"

#include <semaphore.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/failpoint.h"

namespace dcpctl {

namespace {

constexpr uint64_t kMiB = 1ull << 20;

// ---- the part buffers: one pool per process, set aside from --max-memory ----
struct Pool {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t part = 8 * kMiB;
  unsigned cap = 2, used = 0;
  std::vector<std::unique_ptr<uint8_t[]>> spare;

  std::unique_ptr<uint8_t[]> take() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return used < cap; });
    ++used;
    if (!spare.empty()) {
      auto b = std::move(spare.back());
      spare.pop_back();
      return b;
    }
    lock.unlock();
    return std::unique_ptr<uint8_t[]>(new uint8_t[part]);
  }
  void give(std::unique_ptr<uint8_t[]> b) {
    if (!b) return;
    {
      std::lock_guard<std::mutex> lock(mu);
      --used;
      spare.push_back(std::move(b));
    }
    cv.notify_all();
  }
};

// ---- writes at offsets: when the lanes run, and which tasks may start (see the header) ----
struct WriteWindow {
  std::mutex mu;
  std::condition_variable cv;
  bool started = false, failed = false;
  size_t ahead = 1;          // a task starts at most this many tasks past the earliest unfinished one
  std::vector<bool> done;    // per task of the executor's list (another process's: done)
  std::vector<size_t> rank;  // per task: its place among this process's tasks
  size_t earliest = 0;       // the first task not done

  std::exception_ptr first;  // the failure that stopped the lanes, rethrown to those that wait

  // `cause` (the exception being handled, in a catch block) is the one the waiting lanes rethrow,
  // so whichever lane reports first, the error is the cause, not "another lane failed".
  void fail(std::exception_ptr cause) {
    {
      std::lock_guard<std::mutex> lock(mu);
      failed = true;
      if (!first) first = cause;
    }
    cv.notify_all();
  }
};

// ---- every upload this process started and every object it completed, for cleanup ----
struct Entry {
  enum State { Starting, Open, Completing, Done, Gone } state = Starting;
  store::Location loc;
  std::string id;
};

struct Registry {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::shared_ptr<Entry>> entries;
  bool closed = false;  // a signal is being handled: nothing starts or completes any more
  std::atomic<int> live{0};
  int sending = 0;  // part requests under way (send_begin .. send_end): settled before an abort
};

// The signal's route to the session under way: the handler can only post a semaphore, which the
// cleanup thread (one per process, started with the first upload) waits on.
struct SignalRoute {
  std::atomic<int> signal{0};
  std::atomic<bool> thread_ready{false};
  sem_t sem;
  std::once_flag thread_once;
  std::atomic<UploadSession::Impl*> active{nullptr};
  std::atomic<void (*)(const char*)> printer{nullptr};
};
SignalRoute g_sig;

// A thread that must not go on once a signal is being handled (it would start or complete an
// upload, or report success): the cleanup thread ends the process.
[[noreturn]] void park() {
  for (;;) ::pause();
}

// Cleanup after a failure goes on past errors, but says what it could not undo: an upload left
// open or an object left behind is the user's to remove.
void abort_quietly(const Entry& e, std::vector<std::string>& leftovers) noexcept {
  try {
    store::of(e.loc).abort_upload(e.loc, e.id);
  } catch (const std::exception& x) {
    try {
      leftovers.push_back("could not abort the upload of " + e.loc.url() +
                          " (abort it or let a lifecycle rule): " + x.what());
    } catch (...) {
    }
  }
}

void remove_quietly(const Entry& e, std::vector<std::string>& leftovers) noexcept {
  try {
    store::of(e.loc).remove(e.loc);
  } catch (const std::exception& x) {
    try {
      leftovers.push_back("could not delete " + e.loc.url() + ", written by this failed run: " + x.what());
    } catch (...) {
    }
  }
}

}  // namespace

// The record that this process is writing uploads for an output (UploadSession::journal_in).
struct Journal {
  std::mutex mu;
  std::optional<store::Location> loc;
  std::string output;
  bool written = false;
};

struct UploadSession::Impl {
  Pool pool;
  WriteWindow window;
  Registry reg;
  Journal journal;
  std::vector<std::string> leftovers;  // what a cleanup could not undo
};

namespace {

bool closing_locked(const Registry& reg) {
  return reg.closed || g_sig.signal.load() != 0;
}

// Writes the session's journal before its first upload begins (one PUT; the uploads it stands for
// are found by listing, store::ObjectStore::open_uploads).
void journal_touch(UploadSession::Impl& s) {
  Journal& j = s.journal;
  std::lock_guard<std::mutex> lock(j.mu);
  if (!j.loc || j.written) return;
  const std::string body =
      nlohmann::json{{"dcpctl_upload_journal", 1}, {"output", j.output}, {"pid", ::getpid()}}.dump();
  store::of(*j.loc).put(*j.loc, body.data(), body.size());
  j.written = true;
}

// Deletes the journal once no upload is open; what cannot be deleted is said.
void journal_drop(UploadSession::Impl& s, std::vector<std::string>& leftovers) noexcept {
  Journal& j = s.journal;
  std::lock_guard<std::mutex> lock(j.mu);
  if (!j.loc || !j.written) return;
  try {
    store::of(*j.loc).remove(*j.loc);
  } catch (const store::NotFound&) {
  } catch (const std::exception& x) {
    try {
      leftovers.push_back("could not delete " + j.loc->url() + ", this run's record of its uploads: " + x.what());
    } catch (...) {
    }
  }
  j.written = false;
}

// After a signal: waits (a while) for the requests that start or complete an upload to settle,
// then aborts what is open and deletes what was completed, and dies of the signal.
void cleanup_thread() {
  while (::sem_wait(&g_sig.sem) != 0) {
  }
  int sig = g_sig.signal.load();
  UploadSession::Impl* session = g_sig.active.load();
  if (session) {
    Registry& reg = session->reg;
    std::vector<std::shared_ptr<Entry>> todo;
    {
      std::unique_lock<std::mutex> lock(reg.mu);
      reg.closed = true;
      // A part still being sent is waited for too: on a store whose parts are objects of their own
      // (GCS), one that lands after the abort listed the parts would be left behind.
      reg.cv.wait_for(lock, std::chrono::seconds(30), [&] {
        return reg.sending == 0 && std::none_of(reg.entries.begin(), reg.entries.end(), [](const auto& e) {
                 return e->state == Entry::Starting || e->state == Entry::Completing;
               });
      });
      todo = reg.entries;
    }
    std::vector<std::string> leftovers;
    for (const auto& e : todo) {
      if (e->state == Entry::Open) abort_quietly(*e, leftovers);
      if (e->state == Entry::Done || e->state == Entry::Completing) remove_quietly(*e, leftovers);
    }
    journal_drop(*session, leftovers);
    if (auto print = g_sig.printer.load())
      for (const auto& l : leftovers) print(l.c_str());
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
  park();
}

void start_cleanup_thread() {
  std::call_once(g_sig.thread_once, [] {
    ::sem_init(&g_sig.sem, 0, 0);
    std::thread(cleanup_thread).detach();
    g_sig.thread_ready = true;
  });
}

std::shared_ptr<Entry> reg_begin(Registry& reg, const store::Location& loc) {
  start_cleanup_thread();
  auto e = std::make_shared<Entry>();
  e->loc = loc;
  {
    std::lock_guard<std::mutex> lock(reg.mu);
    if (!closing_locked(reg)) {
      reg.entries.push_back(e);
      reg.live++;
      return e;
    }
  }
  park();
}

void reg_set(Registry& reg, Entry& e, Entry::State s) {
  {
    std::lock_guard<std::mutex> lock(reg.mu);
    e.state = s;
  }
  reg.cv.notify_all();
}

// Open -> Completing; parks once a signal is being handled (the object must not appear).
void reg_completing(Registry& reg, Entry& e) {
  {
    std::lock_guard<std::mutex> lock(reg.mu);
    if (!closing_locked(reg)) {
      e.state = Entry::Completing;
      return;
    }
  }
  park();
}

void reg_drop(Registry& reg, const std::shared_ptr<Entry>& e) {
  {
    std::lock_guard<std::mutex> lock(reg.mu);
    auto it = std::find(reg.entries.begin(), reg.entries.end(), e);
    if (it != reg.entries.end()) {
      reg.entries.erase(it);
      reg.live--;
    }
    e->state = Entry::Gone;
  }
  reg.cv.notify_all();
}

// A part's request: counted while under way, so that an abort (discard, the signal's cleanup) waits
// for it to settle; parks once a signal is being handled (nothing new goes out).
void send_begin(Registry& reg) {
  {
    std::lock_guard<std::mutex> lock(reg.mu);
    if (!closing_locked(reg)) {
      ++reg.sending;
      return;
    }
  }
  park();
}

void send_end(Registry& reg) {
  {
    std::lock_guard<std::mutex> lock(reg.mu);
    --reg.sending;
  }
  reg.cv.notify_all();
}

std::string strip_slashes(std::string s) {
  while (!s.empty() && s.back() == '/' && s.size() > 5 && s.compare(s.size() - 3, 3, "://") != 0) s.pop_back();
  return s;
}

}  // namespace

bool is_remote(const std::string& path) {
  return store::is_url(path);
}

uint64_t upload_part_size(uint64_t largest_file_bytes, const store::PartRules& rules) {
  const uint64_t parts = std::max<uint64_t>(1, static_cast<uint64_t>(rules.max_parts) * 9 / 10);
  uint64_t p = (largest_file_bytes + parts - 1) / parts;
  p = (p + kMiB - 1) / kMiB * kMiB;
  return std::max<uint64_t>({8 * kMiB, rules.min_part, p});
}

UploadSession::UploadSession(uint64_t part_size, unsigned buffers) : s_(std::make_shared<Impl>()) {
  s_->pool.part = std::max<uint64_t>(5 * kMiB, part_size);
  s_->pool.cap = std::max(1u, buffers);
  // The tasks under way leave at most two unfinished parts each (see the header): the pool holds
  // them with two to spare.
  s_->window.ahead = std::max<size_t>(1, buffers / 2 > 1 ? buffers / 2 - 1 : 1);
  Impl* none = nullptr;
  if (!g_sig.active.compare_exchange_strong(none, s_.get()))
    throw IoError(Where(), "internal: two upload sessions at once");
}

UploadSession::~UploadSession() {
  for (const std::string& l : discard()) {
    if (auto print = g_sig.printer.load()) print(l.c_str());
  }
  g_sig.active.store(nullptr);
}

uint64_t UploadSession::part_bytes() const {
  return s_->pool.part;
}

void UploadSession::start_part_window() {
  WriteWindow& w = s_->window;
  {
    std::lock_guard<std::mutex> lock(w.mu);
    w.started = true;
  }
  w.cv.notify_all();
}

void UploadSession::admit_tasks(const std::vector<bool>& mine) {
  WriteWindow& w = s_->window;
  std::lock_guard<std::mutex> lock(w.mu);
  w.done.assign(mine.size(), false);
  w.rank.assign(mine.size(), 0);
  size_t n = 0;
  for (size_t i = 0; i < mine.size(); ++i) {
    w.done[i] = !mine[i];
    w.rank[i] = n;
    n += mine[i];
  }
  w.earliest = 0;
  while (w.earliest < w.done.size() && w.done[w.earliest]) ++w.earliest;
}

void UploadSession::task_begin(size_t i) {
  WriteWindow& w = s_->window;
  std::unique_lock<std::mutex> lock(w.mu);
  auto rank = [&](size_t t) { return t < w.rank.size() ? w.rank[t] : t; };
  w.cv.wait(lock, [&] { return w.failed || w.earliest >= w.done.size() || rank(i) < rank(w.earliest) + w.ahead; });
  if (w.failed) {
    if (w.first) std::rethrow_exception(w.first);
    throw IoError(Where(), "upload stopped: another lane failed");
  }
}

void UploadSession::task_end(size_t i) {
  WriteWindow& w = s_->window;
  {
    std::lock_guard<std::mutex> lock(w.mu);
    if (i < w.done.size()) w.done[i] = true;
    while (w.earliest < w.done.size() && w.done[w.earliest]) ++w.earliest;
  }
  w.cv.notify_all();
}

void UploadSession::fail_tasks(std::exception_ptr cause) {
  s_->window.fail(std::move(cause));
}

void UploadSession::keep() {
  Registry& reg = s_->reg;
  std::unique_lock<std::mutex> lock(reg.mu);
  if (closing_locked(reg)) {
    lock.unlock();
    park();
  }
  auto& v = reg.entries;
  for (auto it = v.begin(); it != v.end();) {
    if ((*it)->state == Entry::Done) {
      (*it)->state = Entry::Gone;
      it = v.erase(it);
      reg.live--;
    } else {
      ++it;
    }
  }
  if (!v.empty()) return;  // uploads still open: the journal stays until they settle
  lock.unlock();
  std::vector<std::string> left;
  journal_drop(*s_, left);
  lock.lock();
  for (auto& l : left) s_->leftovers.push_back(std::move(l));
}

void UploadSession::journal_in(const std::string& url, const std::string& output) {
  std::lock_guard<std::mutex> lock(s_->journal.mu);
  s_->journal.loc = store::parse_url(url);
  s_->journal.output = output;
}

std::vector<std::string> UploadSession::discard() noexcept {
  Registry& reg = s_->reg;
  std::vector<std::shared_ptr<Entry>> todo;
  {
    std::unique_lock<std::mutex> lock(reg.mu);
    if (closing_locked(reg)) {
      lock.unlock();
      park();
    }
    // Parts still being sent in the background settle first (each request is bounded by its
    // retries and timeouts): aborting under them could leave a part behind (GCS) or let one land
    // in an upload already aborted.
    reg.cv.wait_for(lock, std::chrono::seconds(120), [&] { return reg.sending == 0; });
    todo.swap(reg.entries);
    reg.live = 0;
  }
  std::vector<std::string> leftovers;
  for (const auto& e : todo) {
    if (e->state == Entry::Open) abort_quietly(*e, leftovers);
    if (e->state == Entry::Done) remove_quietly(*e, leftovers);
    e->state = Entry::Gone;
  }
  journal_drop(*s_, leftovers);
  s_->window.fail(std::current_exception());
  std::lock_guard<std::mutex> lock(reg.mu);
  for (auto& l : s_->leftovers) leftovers.push_back(std::move(l));
  s_->leftovers.clear();
  return leftovers;
}

bool uploads_take_signal(int sig) noexcept {
  UploadSession::Impl* session = g_sig.active.load();
  if (!g_sig.thread_ready.load() || !session || session->reg.live.load() == 0) return false;
  int expect = 0;
  if (!g_sig.signal.compare_exchange_strong(expect, sig)) return false;  // a second signal: die now
  ::sem_post(&g_sig.sem);
  return true;
}

void set_leftover_printer(void (*print)(const char*)) {
  g_sig.printer.store(print);
}

void check_remote_output(const std::string& output_in, bool force, const std::string& protect_in) {
  const std::string out = strip_slashes(output_in), prot = strip_slashes(protect_in);
  if (!prot.empty() && is_remote(prot) && is_remote(out)) {
    if (out == prot) throw UsageError(Where(output_in), "output is the checkpoint being read");
    if (out.rfind(prot + "/", 0) == 0)
      throw UsageError(Where(output_in),
                       "output would be written inside the checkpoint being read (" + protect_in + ")");
    if (prot.rfind(out + "/", 0) == 0)
      throw UsageError(Where(output_in),
                       "output contains the checkpoint being read (" + protect_in + "); choose another prefix");
  }
  if (!is_remote(out)) return;
  store::Location loc = store::parse_url(out);
  if (loc.key.empty())
    throw UsageError(Where(output_in), "give a key or a prefix inside the bucket (" + loc.scheme +
                                           "://bucket/name/), not the bucket itself");
  store::ObjectStore& c = store::of(loc);
  // An object, or objects under the prefix: a folder SeaweedFS keeps listing after a failed run
  // deleted what it had completed is not an output that exists (any_object).
  bool exists = c.size_of(loc).has_value() || c.any_object(loc.with_key(loc.key + "/"));
  if (exists && !force) throw UsageError(Where(output_in), "output exists; pass --force to replace it");
}

void clear_remote_prefix(const std::string& url) {
  store::Location loc = store::parse_url(strip_slashes(url));
  if (loc.key.empty())
    throw UsageError(Where(url),
                     "give a prefix inside the bucket (" + loc.scheme + "://bucket/name/), not the bucket itself");
  store::ObjectStore& c = store::of(loc);
  store::Listing l = c.list_objects(loc.with_key(loc.key + "/"), false);
  for (const auto& [key, size] : l.objects) c.remove(loc.with_key(key));
}

// ---- one object ----

struct Upload::State {
  std::shared_ptr<UploadSession::Impl> session;  // kept alive while this upload is (UploadSession::impl)
  store::ObjectStore* store = nullptr;
  store::Location loc;
  std::string url;
  uint64_t part = 0;             // the part size, fixed when the upload is created
  int max_parts = 10000;         // the store's limit
  std::shared_ptr<Entry> entry;  // once a multipart upload (or the PUT) started
  std::mutex start_mu, mu;
  bool committed = false;
  std::vector<std::string> etags;  // [part number - 1]

  // appends
  std::unique_ptr<uint8_t[]> cur;
  uint64_t fill = 0, pos = 0;
  int next_part = 1;
  std::future<void> inflight;

  // writes at offsets
  bool offsets = false;
  uint64_t size = 0;
  struct Part {
    std::unique_ptr<uint8_t[]> buf;
    uint64_t filled = 0;
    bool sent = false;
    std::vector<std::pair<uint64_t, std::string>> aside;  // writes made before the lanes ran
  };
  std::vector<Part> parts;
  // Full parts go out in the background (launch_part), so that a lane goes on writing while its
  // part crosses the network: parts in flight are bounded by the session's part buffers, not by the
  // lanes. The first failure is kept, stops the lanes (window.fail) and is rethrown by the next
  // write and by commit.
  std::vector<std::future<void>> sending;  // under mu
  std::exception_ptr send_error;           // under mu

  uint64_t part_len(size_t k) const { return std::min(part, size - k * part); }

  void throw_send_error() {
    std::lock_guard<std::mutex> lock(mu);
    if (send_error) std::rethrow_exception(send_error);
  }

  // Part k (0-based), whole in its buffer: sent by a thread of its own, its buffer back to the
  // pool when the request ends, either way.
  void launch_part(size_t k, uint64_t len) {
    std::lock_guard<std::mutex> lock(mu);
    if (send_error) std::rethrow_exception(send_error);
    std::shared_ptr<uint8_t[]> buf(parts[k].buf.release(),
                                   [pool = &session->pool](uint8_t* p) { pool->give(std::unique_ptr<uint8_t[]>(p)); });
    sending.push_back(std::async(std::launch::async, [this, k, len, buf]() mutable {
      try {
        send(static_cast<int>(k) + 1, buf.get(), len);
        buf.reset();
        std::lock_guard<std::mutex> l(mu);
        parts[k].sent = true;
      } catch (...) {
        buf.reset();
        {
          std::lock_guard<std::mutex> l(mu);
          if (!send_error) send_error = std::current_exception();
        }
        session->window.fail(std::current_exception());
      }
    }));
  }

  // Waits for every part sent in the background (they never throw: failures are in send_error).
  void wait_sends() {
    std::vector<std::future<void>> v;
    {
      std::lock_guard<std::mutex> lock(mu);
      v.swap(sending);
    }
    for (auto& f : v) f.wait();
  }

  const std::string& upload_id() {
    std::lock_guard<std::mutex> lock(start_mu);
    if (entry && entry->state == Entry::Open) return entry->id;
    if (entry && entry->state == Entry::Gone) throw IoError(Where(url), "upload abandoned (the run failed)");
    entry = reg_begin(session->reg, loc);
    try {
      journal_touch(*session);  // before the upload exists: a SIGKILL never leaves one unrecorded
      entry->id = store->start_upload(loc);
    } catch (...) {
      reg_drop(session->reg, entry);
      throw;
    }
    reg_set(session->reg, *entry, Entry::Open);
    return entry->id;
  }

  void send(int number, const uint8_t* data, uint64_t n) {
    if (number > max_parts)
      throw IoError(Where(url), "more than " + std::to_string(max_parts) + " parts of " + std::to_string(part) +
                                    " bytes: the object is larger than planned");
    const std::string& id = upload_id();
    send_begin(session->reg);
    struct End {
      Registry& reg;
      ~End() { send_end(reg); }
    } end{session->reg};
    // Tests: the process stops itself once, at its first part, for a signal to be sent to it.
    static std::atomic<bool> stopped{false};
    if (!stopped.exchange(true)) failpoint_stop("s3-upload-part");
    std::string etag = store->upload_part(loc, id, number, data, n);
    std::lock_guard<std::mutex> lock(mu);
    if (etags.size() < static_cast<size_t>(number)) etags.resize(static_cast<size_t>(number));
    etags[static_cast<size_t>(number) - 1] = std::move(etag);
  }

  void wait_inflight() {
    if (inflight.valid()) inflight.get();
  }

  // A full buffer goes out in the background while the next fills (one in flight at a time).
  void flush_full() {
    wait_inflight();
    int number = next_part++;
    std::shared_ptr<uint8_t[]> buf(cur.release(),
                                   [pool = &session->pool](uint8_t* p) { pool->give(std::unique_ptr<uint8_t[]>(p)); });
    uint64_t n = fill;
    fill = 0;
    inflight = std::async(std::launch::async, [this, number, buf, n] { send(number, buf.get(), n); });
  }

  void complete() {
    reg_completing(session->reg, *entry);
    try {
      store->complete_upload(loc, entry->id, etags);
    } catch (...) {
      reg_set(session->reg, *entry, Entry::Open);
      throw;
    }
    reg_set(session->reg, *entry, Entry::Done);
  }

  void put(const uint8_t* data, uint64_t n) {
    std::lock_guard<std::mutex> lock(start_mu);
    entry = reg_begin(session->reg, loc);
    reg_completing(session->reg, *entry);
    try {
      store->put(loc, data, n);
    } catch (...) {
      reg_drop(session->reg, entry);
      throw;
    }
    reg_set(session->reg, *entry, Entry::Done);
  }
};

Upload::Upload(const std::string& url, UploadSession& session) : s_(std::make_unique<State>()) {
  s_->session = session.impl();
  s_->url = url;
  s_->loc = store::parse_url(url);
  s_->store = &store::of(s_->loc);
  s_->part = session.part_bytes();
  s_->max_parts = s_->store->part_rules().max_parts;
}

Upload::~Upload() {
  State& s = *s_;
  try {
    s.wait_inflight();
  } catch (...) {
  }
  s.wait_sends();
  Pool& pool = s.session->pool;
  pool.give(std::move(s.cur));
  for (auto& p : s.parts) pool.give(std::move(p.buf));
  Registry& reg = s.session->reg;
  bool open = false;
  if (s.entry) {
    std::lock_guard<std::mutex> lock(reg.mu);
    open = s.entry->state == Entry::Open && !closing_locked(reg);
  }
  if (open) {
    std::vector<std::string> leftovers;
    abort_quietly(*s.entry, leftovers);
    reg_drop(reg, s.entry);
    std::lock_guard<std::mutex> lock(reg.mu);
    for (auto& l : leftovers) s.session->leftovers.push_back(std::move(l));
  }
}

const std::string& Upload::url() const {
  return s_->url;
}

void Upload::expect_size(uint64_t size) {
  State& s = *s_;
  if (s.pos || s.fill || s.offsets)
    throw IoError(Where(s.url), "internal: the object's size is given before anything is written");
  s.offsets = true;
  s.size = size;
  size_t n = static_cast<size_t>((size + s.part - 1) / s.part);
  if (n > static_cast<size_t>(s.max_parts))
    throw IoError(Where(s.url), "an object of " + std::to_string(size) + " bytes needs more than " +
                                    std::to_string(s.max_parts) + " parts");
  s.parts.resize(n);
}

void Upload::write_at(const void* data, size_t n, uint64_t offset) {
  State& s = *s_;
  if (!s.offsets) {
    if (offset != s.pos + s.fill)
      throw IoError(Where(s.url, offset), "internal: a write at an offset into an object written in order");
    return append(data, n);
  }
  if (offset > s.size || n > s.size - offset)
    throw IoError(Where(s.url, offset), "internal: a write of " + std::to_string(n) + " bytes past the planned size " +
                                            std::to_string(s.size));
  s.throw_send_error();  // a part that failed in the background stops the writes
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    size_t k = static_cast<size_t>(offset / s.part);
    uint64_t start = k * s.part, len = s.part_len(k);
    uint64_t m = std::min<uint64_t>(n, start + len - offset);
    uint8_t* buf = nullptr;
    {
      std::unique_lock<std::mutex> lock(s.mu);
      State::Part& part = s.parts[k];
      if (!part.buf) {
        bool before;
        {
          std::lock_guard<std::mutex> wl(s.session->window.mu);
          before = !s.session->window.started;
        }
        if (before) {
          // Set up (the headers): kept aside until a lane opens the part, so that set up takes no
          // buffer of the pool for each of many files.
          part.aside.emplace_back(offset - start, std::string(reinterpret_cast<const char*>(p), m));
          part.filled += m;
          if (part.filled == len) {
            // Written whole before the lanes ran (a header as long as a part): it goes out now,
            // from the bytes kept aside, and needs no buffer of the pool.
            std::vector<uint8_t> whole(len);
            for (const auto& [at, bytes] : part.aside) std::memcpy(whole.data() + at, bytes.data(), bytes.size());
            part.aside.clear();
            lock.unlock();
            s.send(static_cast<int>(k) + 1, whole.data(), len);
            lock.lock();
            part.sent = true;
          }
          p += m;
          offset += m;
          n -= m;
          continue;
        }
        lock.unlock();
        std::unique_ptr<uint8_t[]> b = s.session->pool.take();
        lock.lock();
        if (!part.buf) {
          part.buf = std::move(b);
          for (const auto& [at, bytes] : part.aside) std::memcpy(part.buf.get() + at, bytes.data(), bytes.size());
          part.aside.clear();
        } else {
          s.session->pool.give(std::move(b));
        }
      }
      buf = part.buf.get();
    }
    std::memcpy(buf + (offset - start), p, m);
    bool full;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      State::Part& part = s.parts[k];
      part.filled += m;
      if (part.filled > len)
        throw IoError(Where(s.url, offset), "internal: bytes of part " + std::to_string(k + 1) + " written twice");
      full = part.filled == len;
    }
    if (full) s.launch_part(k, len);
    p += m;
    offset += m;
    n -= m;
  }
}

void Upload::append(const void* data, size_t n) {
  State& s = *s_;
  if (s.offsets) return write_at(data, n, s.pos);  // pos counts appends only
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    if (!s.cur) s.cur = s.session->pool.take();
    uint64_t k = std::min<uint64_t>(n, s.part - s.fill);
    std::memcpy(s.cur.get() + s.fill, p, k);
    s.fill += k;
    s.pos += k;
    p += k;
    n -= k;
    if (s.fill == s.part) s.flush_full();
  }
}

void Upload::commit() {
  State& s = *s_;
  // Tests: DCPCTL_FAILPOINT=s3-commit/<name>:stop stops the process before object <name> (the last
  // part of its key) is completed, once the files before it are.
  failpoint_stop(("s3-commit/" + s.loc.key.substr(s.loc.key.find_last_of('/') + 1)).c_str());
  if (s.offsets) {
    s.wait_sends();
    s.throw_send_error();
    for (size_t k = 0; k < s.parts.size(); ++k)
      if (!s.parts[k].sent)
        throw IoError(Where(s.url, k * s.part), "internal: part " + std::to_string(k + 1) + " was not written whole (" +
                                                    std::to_string(s.parts[k].filled) + " of " +
                                                    std::to_string(s.part_len(k)) + " bytes)");
    if (s.parts.empty()) {
      s.put(nullptr, 0);
    } else {
      s.complete();
    }
    s.committed = true;
    return;
  }
  if (s.next_part == 1) {  // nothing went out yet: one PUT
    s.put(s.cur.get(), s.fill);
    s.session->pool.give(std::move(s.cur));
    s.fill = 0;
    s.committed = true;
    return;
  }
  s.wait_inflight();
  if (s.fill > 0) {
    s.send(s.next_part++, s.cur.get(), s.fill);
    s.fill = 0;
  }
  s.session->pool.give(std::move(s.cur));
  s.complete();
  s.committed = true;
}

}  // namespace dcpctl
