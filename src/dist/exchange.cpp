#include "dist/exchange.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>

#include "dist/group.h"
#include "dist/tags.h"
#include "plan/memory.h"
#include "util/dtype.h"
#include "util/error.h"
#include "util/failpoint.h"

namespace dcpctl {

Visibility gather_visibility(Group& group, const Checkpoint& ck) {
  size_t nf = ck.md.files.size();
  Visibility vis = Visibility::everything(group.size(), nf);
  std::string mine(nf, '0');
  for (size_t f = 0; f < nf; ++f)
    if (ck.files[f].size) mine[f] = '1';
  std::vector<std::string> all = group.all_gather("sees", mine);
  for (int r = 0; r < group.size(); ++r) {
    const std::string& s = all[static_cast<size_t>(r)];
    if (s.size() != nf)
      throw Error(Where(), "rank " + std::to_string(r) + " lists " + std::to_string(s.size()) +
                               " data files, this rank " + std::to_string(nf));
    for (size_t f = 0; f < nf; ++f) vis.sees[static_cast<size_t>(r)][f] = s[f] == '1';
  }
  return vis;
}

void gather_raw_items(Group& group, const Visibility& vis, ItemReader& reader, const std::vector<BytesMeta>& items,
                      int to) {
  const Checkpoint& ck = reader.checkpoint();
  int me = group.rank();
  for (const BytesMeta& b : items) {
    const StorageRef& ref = b.storage;
    if (!ref.present() || vis.can_read(to, ref.file)) continue;
    int from = -1;
    for (int r = 0; r < group.size() && from < 0; ++r)
      if (vis.can_read(r, ref.file)) from = r;
    if (from < 0)
      throw FormatError(Where(ck.path_of(ref.file), ref.offset, b.fqn),
                        "no rank can read this data file (--local-files)");
    if (me == from) {
      ReadFile f(ck.path_of(ref.file));
      group.send_pieces(to, tag::kRawItems, ref.length,
                        [&](uint64_t at, uint8_t* buf, uint64_t n) { f.read_at(ref.offset + at, buf, n, b.fqn); });
    } else if (me == to) {
      auto raw = std::make_shared<MemorySource>();
      group.recv_pieces(from, tag::kRawItems, ref.length,
                        [&](uint64_t, const uint8_t* buf, uint64_t n) { raw->append(buf, n); });
      reader.provide(ref, raw);
    }
  }
}

ChunkExchange::ChunkExchange(Group& group, const ItemReader& reader, std::vector<Transfer> plan, unsigned lanes,
                             uint64_t window, MemoryGate& gate)
    : group_(group),
      reader_(reader),
      gate_(gate),
      md_(reader.checkpoint().md),
      plan_(std::move(plan)),
      lanes_(std::max(1u, lanes)),
      window_(window),
      next_(lanes_, 0),
      buffers_(lanes_) {}

ChunkExchange::~ChunkExchange() {
  stop_ = true;
  for (auto& t : pushers_)
    if (t.joinable()) t.join();
}

void ChunkExchange::start_pushing() {
  for (unsigned l = 0; l < lanes_; ++l) {
    bool any = false;
    for (const Transfer& t : plan_) any = any || (t.lane == l && t.owner == group_.rank() && t.writer != group_.rank());
    if (any)
      pushers_.emplace_back([this, l] {
        try {
          push_lane(l);
        } catch (...) {
          fail(std::current_exception());
        }
      });
  }
}

void ChunkExchange::finish_pushing() {
  for (auto& t : pushers_) t.join();
  pushers_.clear();
  if (std::exception_ptr e = first_error()) std::rethrow_exception(e);
}

void ChunkExchange::fail(std::exception_ptr e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (first_error_) return;
    first_error_ = e;
  }
  stop_ = true;
  group_.abort_transfers();
}

std::exception_ptr ChunkExchange::first_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return first_error_;
}

void ChunkExchange::read_local(size_t tensor, size_t chunk, uint8_t* buf, size_t skip, const WindowFn& fn,
                               GateCharge charge) {
  const TensorMeta& t = md_.tensors[tensor];
  uint64_t total = t.chunk_numel(chunk) * itemsize(*t.dtype);
  if (t.storage[chunk].transforms == 0) {
    if (std::optional<DirectRun> run = reader_.direct_run(t, chunk)) {
      // In place: the item is opened and checked once, then read a window at a time.
      for (uint64_t off = 0; off < total; off += window_) {
        uint64_t n = std::min(window_, total - off);
        run->file->read_at(run->offset + off, buf + skip, n, t.fqn);
        fn(buf + skip, off, n);
      }
      return;
    }
  }
  // A transformed item, or a saved view that is not contiguous, is decoded whole once (the
  // decoded item or the view's storage, and the dense chunk); its windows come out of that copy.
  std::optional<GateReservation> hold;
  if (charge.gate) hold.emplace(*charge.gate, charge.bytes);
  std::unique_ptr<uint8_t[]> whole(new uint8_t[total]);
  reader_.read_chunk(t, chunk, whole.get());
  for (uint64_t off = 0; off < total; off += window_) {
    uint64_t n = std::min(window_, total - off);
    std::memcpy(buf + skip, whole.get() + off, n);
    fn(buf + skip, off, n);
  }
}

void ChunkExchange::push_lane(unsigned lane) {
  std::unique_ptr<uint8_t[]> buf(new uint8_t[sizeof(Header) + window_]);
  int me = group_.rank();
  uint64_t sent = 0;
  for (const Transfer& tr : plan_) {
    if (tr.lane != lane || tr.owner != me || tr.writer == me) continue;
    if (stop_) return;
    uint32_t index = 0;
    bool sending = false;
    auto send_window = [&](const uint8_t*, uint64_t, uint64_t n) {
      Header h{0, tr.tensor, tr.chunk, index++};
      std::memcpy(buf.get(), &h, sizeof h);
      sending = true;
      group_.send(tr.writer, tag::kChunkLanes + lane, buf.get(), sizeof h + n);
      sending = false;
      if (++sent == 2) failpoint("exchange-push", me);  // dies mid-run, after sending some windows
    };
    try {
      // A transformed chunk's decode was set aside from this rank's budget (see the header);
      // a view found not to be contiguous takes its memory from the gate.
      bool set_aside = md_.tensors[tr.tensor].storage[tr.chunk].transforms != 0;
      const TensorMeta& t = md_.tensors[tr.tensor];
      read_local(tr.tensor, tr.chunk, buf.get(), sizeof(Header), send_window,
                 set_aside ? GateCharge{} : GateCharge{&gate_, whole_chunk_need(t, tr.chunk)});
    } catch (const std::exception& e) {
      if (sending) throw;  // the transport failed: the writer learns it from its own side
      // The writer waits for this window: tell it to fetch our error rather than time out.
      const auto* err = dynamic_cast<const Error*>(&e);
      int code = static_cast<int>(err ? err->exit_code() : ExitCode::failure);
      group_.publish("exchange-error/" + std::to_string(me), std::to_string(code) + "\n" + e.what());
      const TensorMeta& t = md_.tensors[tr.tensor];
      uint64_t total = t.chunk_numel(tr.chunk) * itemsize(*t.dtype);
      uint64_t n = std::min(window_, total - std::min<uint64_t>(total, static_cast<uint64_t>(index) * window_));
      Header h{1, tr.tensor, tr.chunk, index};
      std::memcpy(buf.get(), &h, sizeof h);
      try {
        group_.send(tr.writer, tag::kChunkLanes + lane, buf.get(), sizeof h + n);
      } catch (const std::exception&) {
        // The writer is gone too; our own error is what this rank reports.
      }
      throw;
    }
  }
}

void ChunkExchange::owner_failed(int owner) {
  std::string why = group_.fetch("exchange-error/" + std::to_string(owner));
  size_t nl = why.find('\n');
  int code = nl == std::string::npos ? 1 : std::atoi(why.substr(0, nl).c_str());
  throw_error(static_cast<ExitCode>(code), Where(),
              "rank " + std::to_string(owner) +
                  " could not read its share: " + (nl == std::string::npos ? why : why.substr(nl + 1)));
}

void ChunkExchange::receive(unsigned lane, size_t tensor, size_t chunk, const WindowFn& fn, GateCharge charge) {
  int me = group_.rank();
  size_t& pos = next_[lane];
  while (pos < plan_.size() && (plan_[pos].writer != me || plan_[pos].lane != lane)) ++pos;
  if (pos == plan_.size() || plan_[pos].tensor != tensor || plan_[pos].chunk != chunk)
    throw Error(
        Where("", std::nullopt, md_.tensors[tensor].fqn),
        "internal: lane " + std::to_string(lane) + " consumed chunk " + std::to_string(chunk) + " out of plan order");
  const Transfer tr = plan_[pos++];
  if (!buffers_[lane]) buffers_[lane].reset(new uint8_t[sizeof(Header) + window_]);
  uint8_t* buf = buffers_[lane].get();
  if (tr.owner == me) {
    read_local(tensor, chunk, buf, 0, fn, charge);
    return;
  }
  const TensorMeta& t = md_.tensors[tensor];
  uint64_t total = t.chunk_numel(chunk) * itemsize(*t.dtype);
  uint32_t index = 0;
  for (uint64_t off = 0; off < total; off += window_, ++index) {
    if (stop_) throw Error(Where(), "stopped");
    uint64_t n = std::min(window_, total - off);
    group_.recv(tr.owner, tag::kChunkLanes + lane, buf, sizeof(Header) + n);
    Header h;
    std::memcpy(&h, buf, sizeof h);
    if (h.status != 0) owner_failed(tr.owner);
    if (h.tensor != tr.tensor || h.chunk != tr.chunk || h.index != index)
      throw Error(Where("", std::nullopt, t.fqn), "internal: rank " + std::to_string(tr.owner) + " sent window " +
                                                      std::to_string(h.index) + " of chunk " + std::to_string(h.chunk) +
                                                      " where window " + std::to_string(index) + " of chunk " +
                                                      std::to_string(chunk) + " was expected");
    fn(buf + sizeof h, off, n);
  }
}

}  // namespace dcpctl
