// The pure parts of the s3:// outputs (store/upload.h): the part size S3's limits force, and the
// order in which writes at offsets admit their tasks. Uploads against a real server: tests/s3/.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>

#include "store/upload.h"

#include <stdexcept>

using namespace dcpctl;

TEST_CASE("part size: 8 MiB, or enough for at most 9,000 parts, in whole MiB") {
  // A store's rules: GCS's XML multipart uploads allow 10,000 parts too; a store with a larger
  // least part gets that.
  CHECK(upload_part_size(0, store::PartRules{16ull << 20, 10000}) == 16ull << 20);
  CHECK(upload_part_size(1000ull << 20, store::PartRules{5ull << 20, 100}) == 12ull << 20);  // 90 parts of 11.2 MiB
  constexpr uint64_t MiB = 1ull << 20;
  CHECK(upload_part_size(0) == 8 * MiB);
  CHECK(upload_part_size(70'000 * MiB) == 8 * MiB);  // 8,750 parts
  CHECK(upload_part_size(80'000 * MiB) == 9 * MiB);  // 8.9 MiB a part, rounded up
  for (uint64_t bytes : {5'000'000'000ull, 1'000'000'000'000ull, 5'000'000'000'000ull}) {
    uint64_t p = upload_part_size(bytes);
    CHECK(p % MiB == 0);
    CHECK((bytes + p - 1) / p <= 9000);  // S3 allows 10,000
  }
}

TEST_CASE("task admission: a task starts only a few tasks past the earliest unfinished one") {
  UploadSession s(8ull << 20, 6);                        // 6 buffers: 2 tasks ahead
  s.admit_tasks({true, false, true, true, true, true});  // task 1 is another process's
  s.start_part_window();
  s.task_begin(0);
  s.task_begin(2);  // task 1 is not ours: 2 is the second of ours
  std::atomic<bool> started{false};
  std::thread t([&] {
    s.task_begin(3);  // waits for task 0
    started = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK_FALSE(started.load());
  s.task_end(0);
  t.join();
  CHECK(started.load());
  s.task_end(2);
  s.task_end(3);
  s.task_begin(5);
  s.task_end(5);
  s.task_begin(4);
  s.task_end(4);
}

TEST_CASE("task admission: a failed lane's error reaches the tasks that wait") {
  UploadSession s(8ull << 20, 3);  // one task at a time
  s.admit_tasks({true, true});
  s.start_part_window();
  s.task_begin(0);
  std::thread t([&] {
    try {
      throw std::runtime_error("disk gone");
    } catch (...) {
      s.fail_tasks(std::current_exception());
    }
  });
  t.join();
  CHECK_THROWS_WITH(s.task_begin(1), "disk gone");
}
