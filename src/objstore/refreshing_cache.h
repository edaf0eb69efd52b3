// What a store signs or authorizes its requests with (AWS keys, a Google access token), shared by
// every thread of its client and fetched again before it expires: one thread fetches, under the
// lock, while the others wait. T has `std::optional<int64_t> expiration` (Unix seconds; nullopt:
// never refreshed but after a refusal) and `std::string source` (where it came from, for --json).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "util/error.h"

namespace dcpctl::store {

// Whether `t` must be fetched again at `now`: it expires within `margin_s` seconds.
template <class T>
bool needs_refresh(const T& t, int64_t now, int64_t margin_s) {
  return t.expiration && *t.expiration - margin_s <= now;
}

template <class T>
class RefreshingCache {
 public:
  // `fetch` gives a fresh one (a credential chain's resolve, or a fixed value in tests).
  RefreshingCache(std::function<T()> fetch, std::function<int64_t()> now, int64_t margin_s)
      : fetch_(std::move(fetch)), now_(std::move(now)), margin_s_(margin_s) {}

  // The current one, fetched first when there is none or it is within the margin. A failed
  // refresh while the old one has not yet expired keeps it (the next call tries again).
  std::shared_ptr<const T> get() {
    std::lock_guard<std::mutex> lock(mu_);
    if (current_ && !needs_refresh(*current_, now_(), margin_s_)) return current_;
    try {
      auto fresh = std::make_shared<const T>(fetch_());
      ++fetches_;
      current_ = fresh;
    } catch (const Error&) {
      if (current_ && current_->expiration && *current_->expiration > now_()) return current_;
      throw;
    }
    return current_;
  }

  // The server refused `used` (expired keys, a 401): fetch again, unless another thread already did.
  std::shared_ptr<const T> refresh_after_refused(const std::shared_ptr<const T>& used) {
    std::lock_guard<std::mutex> lock(mu_);
    if (current_ != used) return current_;
    current_ = std::make_shared<const T>(fetch_());
    ++fetches_;
    return current_;
  }

  uint64_t fetches() const {
    std::lock_guard<std::mutex> lock(mu_);
    return fetches_;
  }
  std::string source() const {  // of the last one fetched ("" before)
    std::lock_guard<std::mutex> lock(mu_);
    return current_ ? current_->source : std::string();
  }

 private:
  std::function<T()> fetch_;
  std::function<int64_t()> now_;
  int64_t margin_s_;
  mutable std::mutex mu_;
  std::shared_ptr<const T> current_;
  uint64_t fetches_ = 0;
};

}  // namespace dcpctl::store
