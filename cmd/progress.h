// A progress line on stderr for long reads and writes: only on a terminal, a few times a second.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>

#include "cmd/format.h"

namespace dcpctl::cli {

class ProgressLine {
 public:
  explicit ProgressLine(bool on) : on_(on), start_(std::chrono::steady_clock::now()) {}
  void update(uint64_t done, uint64_t total) {
    if (!on_) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto now = std::chrono::steady_clock::now();
    if (done < total && now - last_ < std::chrono::milliseconds(200)) return;
    last_ = now;
    double secs = std::chrono::duration<double>(now - start_).count();
    double rate = secs > 0 ? static_cast<double>(done) / secs : 0;
    double eta = rate > 0 ? static_cast<double>(total - done) / rate : 0;
    std::fprintf(stderr, "\r%s / %s  %s/s  ETA %.0fs   ", human_bytes(done).c_str(), human_bytes(total).c_str(),
                 human_bytes(static_cast<uint64_t>(rate)).c_str(), eta);
    dirty_ = true;
  }
  void finish() {
    if (dirty_) std::fprintf(stderr, "\n");
  }

 private:
  bool on_, dirty_ = false;
  std::mutex mu_;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace dcpctl::cli
