// The write planner (plan/pieces, plan/plan) on metadata models built in memory: which chunk
// bytes land where (pieces, runs), copy_box against an element-by-element copy, whether a record
// streams, target boxes for every target, file layout, and memory needs and budgets.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "item/chunk_source.h"
#include "metadata_models.h"
#include "plan/plan.h"
#include "util/error.h"

using namespace dcpctl;

namespace {

// A chunk source over a tensor held whole in memory (float32, element i holds i): it serves each
// chunk's dense bytes, and records which chunks were read and how each use was announced and ended.
class MemoryChunks final : public ChunkSource {
 public:
  MemoryChunks(const TensorMeta& t, bool ordered, bool ranges = false)
      : t_(t), ordered_(ordered), ranges_(ranges), full_(t.numel()) {
    std::iota(full_.begin(), full_.end(), 0.0f);
  }
  std::optional<DirectRun> in_place(const TensorMeta&, size_t) const override { return std::nullopt; }
  void read(unsigned, const TensorMeta&, size_t, const WindowFn&, GateCharge) override { FAIL("not used"); }
  void read_into(unsigned, const TensorMeta& t, size_t chunk, uint8_t* dst) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      reads.push_back(chunk);
    }
    Box cb = chunk_box(t, chunk);
    copy_box(reinterpret_cast<const uint8_t*>(full_.data()), whole_box(t), dst, cb, cb, 4);
  }
  // With `ranges`: a range read alone (what LocalChunks does), its bytes counted.
  void read_range(unsigned lane, const TensorMeta& t, size_t chunk, uint64_t from, uint64_t n, uint8_t* dst) override {
    if (!ranges_) return ChunkSource::read_range(lane, t, chunk, from, n, dst);
    std::vector<uint8_t> whole(t.chunk_numel(chunk) * 4);
    Box cb = chunk_box(t, chunk);
    copy_box(reinterpret_cast<const uint8_t*>(full_.data()), whole_box(t), whole.data(), cb, cb, 4);
    std::memcpy(dst, whole.data() + from, n);
    std::lock_guard<std::mutex> lock(mu_);
    bytes_read += n;
  }
  bool reads_ranges() const override { return ranges_; }
  void done(const TensorMeta&, size_t chunk) override {
    std::lock_guard<std::mutex> lock(mu_);
    dones.push_back(chunk);
  }
  bool ordered() const override { return ordered_; }
  // What box `b` holds, element by element.
  std::vector<float> expected(const Box& b) const {
    std::vector<float> out;
    std::vector<int64_t> idx(b.offsets);
    for (uint64_t n = 0; n < b.numel(); ++n) {
      uint64_t flat = 0;
      for (size_t d = 0; d < idx.size(); ++d)
        flat = flat * static_cast<uint64_t>(t_.shape[d]) + static_cast<uint64_t>(idx[d]);
      out.push_back(full_[flat]);
      for (size_t d = idx.size(); d-- > 0;) {
        if (++idx[d] < b.offsets[d] + b.sizes[d]) break;
        idx[d] = b.offsets[d];
      }
    }
    return out;
  }
  std::vector<size_t> reads, dones;
  uint64_t bytes_read = 0;

 private:
  const TensorMeta& t_;
  bool ordered_, ranges_;
  std::vector<float> full_;
  std::mutex mu_;
};

}  // namespace

TEST_CASE("pieces: is_run allows leading unit dims, then one partial dim, then full dims") {
  std::vector<int64_t> shape{4, 6, 8};
  CHECK(is_run(box({0, 0, 0}, {4, 6, 8}), shape));
  CHECK(is_run(box({1, 0, 0}, {2, 6, 8}), shape));        // dim-0 shard
  CHECK(is_run(box({1, 2, 0}, {1, 3, 8}), shape));        // one row-block inside one dim-0 slice
  CHECK(is_run(box({1, 2, 5}, {1, 1, 3}), shape));        // part of one innermost row
  CHECK_FALSE(is_run(box({0, 0, 0}, {2, 3, 8}), shape));  // dim-1 split over two dim-0 slices
  CHECK_FALSE(is_run(box({0, 0, 0}, {4, 6, 4}), shape));  // a column split
  CHECK(is_run(box({}, {}), {}));                         // 0-d
  CHECK(first_element(box({1, 2, 5}, {1, 1, 3}), shape) == 1 * 48 + 2 * 8 + 5);
}

TEST_CASE("pieces: copy_box matches an element-by-element copy for random boxes") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    size_t nd = 1 + rng() % 4;
    std::vector<int64_t> shape(nd);
    for (auto& s : shape) s = 1 + rng() % 5;
    auto random_box = [&] {
      Box b{std::vector<int64_t>(nd), std::vector<int64_t>(nd)};
      for (size_t d = 0; d < nd; ++d) {
        b.offsets[d] = rng() % shape[d];
        b.sizes[d] = 1 + rng() % (shape[d] - b.offsets[d]);
      }
      return b;
    };
    Box sb = random_box(), db = random_box(), in;
    if (!intersect(sb, db, in)) continue;
    const size_t item = 2;
    // Element value = its global C-order index, in every buffer that holds it.
    auto fill = [&](const Box& b) {
      std::vector<uint16_t> v(b.numel());
      std::vector<int64_t> idx(nd, 0);
      for (size_t i = 0; i < v.size(); ++i) {
        size_t rem = i;
        for (size_t d = nd; d-- > 0;) {
          idx[d] = b.offsets[d] + static_cast<int64_t>(rem % static_cast<size_t>(b.sizes[d]));
          rem /= static_cast<size_t>(b.sizes[d]);
        }
        v[i] = static_cast<uint16_t>(first_element(Box{idx, std::vector<int64_t>(nd, 1)}, shape));
      }
      return v;
    };
    std::vector<uint16_t> src = fill(sb), want = fill(db), got(db.numel(), 0xffff);
    copy_box(reinterpret_cast<const uint8_t*>(src.data()), sb, reinterpret_cast<uint8_t*>(got.data()), db, in, item);
    // Exactly the elements of `in` were written, with their own values.
    std::vector<uint16_t> expect(db.numel(), 0xffff);
    for (size_t i = 0; i < want.size(); ++i) {
      size_t rem = i;
      bool inside = true;
      for (size_t d = nd; d-- > 0;) {
        int64_t g = db.offsets[d] + static_cast<int64_t>(rem % static_cast<size_t>(db.sizes[d]));
        rem /= static_cast<size_t>(db.sizes[d]);
        inside = inside && g >= in.offsets[d] && g < in.offsets[d] + in.sizes[d];
      }
      if (inside) expect[i] = want[i];
    }
    INFO("trial " << trial << " sb " << sb.text() << " db " << db.text() << " in " << in.text());
    REQUIRE(got == expect);
  }
}

TEST_CASE("pieces: dim-0 shards into the whole tensor are runs, ordered by where they land") {
  // Saved out of order: the rank holding rows 4..8 first.
  TensorMeta t = tensor("w", {8, 3}, {{4, 0, 4, 3}, {0, 0, 4, 3}});
  std::vector<Piece> p = plan_pieces(t, whole_box(t));
  REQUIRE(p.size() == 2);
  CHECK(p[0].chunk == 1);
  CHECK(p[1].chunk == 0);
  CHECK((p[0].run && p[1].run));
  CHECK(p[0].from == 0);
  CHECK(p[0].to == 0);
  CHECK(p[1].to == 4 * 3 * 4);
  CHECK(p[1].bytes == 4 * 3 * 4);
  CHECK(runs_tile(p, t.nbytes()));
}

TEST_CASE("pieces: resharding 4 rows-shards to 3 gives byte ranges inside both chunks") {
  // 10 rows of 2 float32 over 4 ranks (3, 3, 3, 1) into 3 target ranks (4, 4, 2).
  TensorMeta t = tensor("w", {10, 2}, {{0, 0, 3, 2}, {3, 0, 3, 2}, {6, 0, 3, 2}, {9, 0, 1, 2}});
  std::vector<Piece> p = plan_pieces(t, box({4, 0}, {4, 2}));  // rows 4..8
  REQUIRE(p.size() == 2);
  CHECK(p[0].chunk == 1);  // rows 4,5 of chunk 1 (its rows 1..3)
  CHECK(p[0].from == 1 * 2 * 4);
  CHECK(p[0].bytes == 2 * 2 * 4);
  CHECK(p[0].to == 0);
  CHECK(p[1].chunk == 2);  // rows 6,7 of chunk 2
  CHECK(p[1].from == 0);
  CHECK(p[1].to == 2 * 2 * 4);
  CHECK(runs_tile(p, 4 * 2 * 4));
}

TEST_CASE("pieces: column shards are not runs, a gap or an overlap does not tile") {
  TensorMeta cols = tensor("w", {4, 6}, {{0, 0, 4, 3}, {0, 3, 4, 3}});
  std::vector<Piece> p = plan_pieces(cols, whole_box(cols));
  REQUIRE(p.size() == 2);
  CHECK_FALSE(p[0].run);
  CHECK(p[0].in.text() == "[0:4, 0:3]");
  CHECK_FALSE(runs_tile(p, cols.nbytes()));

  Piece a, b;
  a.run = b.run = true;
  a.bytes = b.bytes = 8;
  b.to = 12;  // a gap of 4 bytes
  CHECK_FALSE(runs_tile({a, b}, 20));
  b.to = 4;  // an overlap
  CHECK_FALSE(runs_tile({a, b}, 12));
  b.to = 8;
  CHECK(runs_tile({a, b}, 16));
  CHECK_FALSE(runs_tile({a, b}, 24));  // short of the end
}

TEST_CASE("plan: consolidated records, the streaming decision and the safetensors layout") {
  TensorMeta rows = tensor("rows", {8, 4}, {{0, 0, 4, 4}, {4, 0, 4, 4}});
  TensorMeta cols = tensor("cols", {4, 8}, {{0, 0, 4, 4}, {0, 4, 4, 4}});
  TensorMeta zstd = tensor("zstd", {8, 4}, {{0, 0, 4, 4}, {4, 0, 4, 4}});
  zstd.storage[1].transforms = 1;
  TensorMeta empty = tensor("empty", {0, 4}, {{0, 0, 0, 4}});
  Checkpoint ck = checkpoint({rows, cols, zstd, empty});
  ck.md.transform_sets.push_back({"zstd"});

  Target st;
  st.format = &formats::safetensors;
  WritePlan plan = plan_write(ck, {}, std::nullopt, st);
  REQUIRE(plan.records.size() == 4);
  const Record &r0 = plan.records[0], &r1 = plan.records[1], &r2 = plan.records[2], &r3 = plan.records[3];
  CHECK((r0.runs && r0.streams));
  CHECK((!r1.runs && !r1.streams));
  CHECK((r2.runs && !r2.streams));  // a zstd chunk is decoded, not read in place
  CHECK_FALSE(r3.streams);          // an empty tensor is stored, not streamed
  // Offsets in the one file, in order.
  REQUIRE(plan.files.size() == 1);
  CHECK(plan.files[0].name == "model.safetensors");
  CHECK(r0.offset == 0);
  CHECK(r1.offset == 128);
  CHECK(r2.offset == 256);
  CHECK(plan.total_bytes == 384);
  // Needs: a run copied in place holds one copy window at most (here the chunk, 64 bytes); a
  // record assembled in a buffer holds it plus the dense copy of a chunk; a zstd run holds the
  // decoded item and the chunk.
  CHECK(r0.need == 64);
  CHECK(r1.need == 128 + 64);
  CHECK(r2.need == 64 * 2);
  CHECK(r2.window_elems == 16);  // its untransformed chunk is copied in place through the window
  CHECK(plan.largest_need == 192);
  CHECK(plan.budget == 1ull << 30);  // automatic: at least 1 GiB

  // A .pt assembles what does not stream, reading chunks on all threads at once.
  Target pt = st;
  pt.format = &formats::torch_file;
  pt.threads = 4;
  WritePlan tp = plan_write(ck, {}, std::nullopt, pt);
  CHECK(tp.records[0].streams);
  CHECK(tp.records[1].need == 128 + 2 * 64);  // min(4 threads, 2 chunks) dense copies
  CHECK(tp.files.size() == 1);
  CHECK(tp.files[0].records.size() == 4);

  // --dtype bf16 halves the output and adds the cast to the needs.
  WritePlan cast = plan_write(ck, {}, DType::BFloat16, st);
  CHECK(cast.total_bytes == 192);
  CHECK(cast.records[0].need == 16 * (4 + 2));  // a window of the 16 elements and their cast
  CHECK(cast.records[0].streams);               // a cast record still streams (cast a window at a time)
}

TEST_CASE("plan: HF shards split at --max-shard-size, whole records only") {
  Checkpoint ck =
      checkpoint({tensor("a", {10}, {{0, 10}}), tensor("b", {10}, {{0, 10}}), tensor("c", {30}, {{0, 30}})});
  Target hf;
  hf.format = &formats::hf_folder;
  hf.max_shard_size = 80;  // bytes: a and b (40 each) fit together, c (120) alone
  WritePlan plan = plan_write(ck, {}, std::nullopt, hf);
  REQUIRE(plan.files.size() == 2);
  CHECK(plan.files[0].name == "model-00001-of-00002.safetensors");
  CHECK(plan.files[0].records == std::vector<size_t>{0, 1});
  CHECK(plan.files[1].records == std::vector<size_t>{2});
  CHECK(plan.records[2].dest == 1);
  CHECK(plan.records[2].offset == 0);
  CHECK(plan.files[1].data_bytes == 120);
}

TEST_CASE("plan: DCP targets, Shard(0) over M ranks with one empty shard, and the kept layout") {
  TensorMeta w = tensor("w", {5, 2}, {{0, 0, 3, 2}, {3, 0, 2, 2}}, DType::Float32, 2);
  TensorMeta s = tensor("step", {}, {{}});
  Checkpoint ck = checkpoint({w, s}, 2);
  Target dcp;
  dcp.format = &formats::dcp;
  dcp.world_size = 4;
  WritePlan plan = plan_write(ck, {}, std::nullopt, dcp);
  // torch.chunk of 5 rows over 4: 2, 2, 1, then one empty shard at offset 5.
  REQUIRE(plan.tensors[0].records.size() == 4);
  std::vector<std::string> boxes;
  for (size_t ri : plan.tensors[0].records) boxes.push_back(plan.records[ri].box.text());
  CHECK(boxes == std::vector<std::string>{"[0:2, 0:2]", "[2:4, 0:2]", "[4:5, 0:2]", "[5:5, 0:2]"});
  CHECK(plan.records[3].pieces.empty());
  CHECK_FALSE(plan.records[3].streams);
  // Target 1 (rows 2..4) takes row 2 from chunk 0 and row 3 from chunk 1: runs that tile it.
  const Record& r1 = plan.records[1];
  REQUIRE(r1.pieces.size() == 2);
  CHECK(r1.pieces[0].from == 2 * 2 * 4);
  CHECK(r1.pieces[1].from == 0);
  CHECK(r1.streams);
  // The 0-d tensor goes to the rank with the fewest bytes so far (rank 3 holds the empty shard).
  CHECK(plan.records[4].dest == 3);
  REQUIRE(plan.files.size() == 4);
  CHECK(plan.files[3].name == "__3_0.distcp");
  CHECK(plan.files[3].records == std::vector<size_t>{3, 4});

  Target keep = dcp;
  keep.keep_layout = true;
  WritePlan kept = plan_write(ck, {}, std::nullopt, keep);
  CHECK(kept.files.size() == 2);
  CHECK(kept.records[0].box.text() == "[0:3, 0:2]");
  CHECK(kept.records[1].dest == 1);  // chunk 1 was in __1_0.distcp

  Target bad = dcp;
  bad.world_size = 0;
  CHECK_THROWS_AS(plan_write(ck, {}, std::nullopt, bad), UsageError);
}

TEST_CASE("plan: budgets, the in-place probe and refusals before any write") {
  TensorMeta w = tensor("w", {1024, 256}, {{0, 0, 512, 256}, {512, 0, 512, 256}});  // 1 MiB float32
  Checkpoint ck = checkpoint({w});
  Target dcp;
  dcp.format = &formats::dcp;
  dcp.world_size = 1;
  // Assembled, target 0 holds the whole tensor and one source chunk's read: 1 MiB + 512 KiB.
  WritePlan plan = plan_write(ck, {}, std::nullopt, dcp);
  CHECK(plan.records[0].need == (1u << 20) + (512u << 10));
  // Under a budget it would not fit, a streaming record whose chunks can be read in place needs
  // nothing; if they cannot, the plan refuses before writing.
  dcp.max_memory = 1 << 20;
  int asked = 0;
  WritePlan small = plan_write(ck, {}, std::nullopt, dcp, [&](const TensorMeta&, size_t) { return ++asked > 0; });
  CHECK(asked == 2);
  CHECK(small.records[0].need == 0);
  CHECK(small.budget == 1u << 20);
  CHECK_THROWS_AS(plan_write(ck, {}, std::nullopt, dcp, [](const TensorMeta&, size_t) { return false; }), UsageError);
  CHECK_THROWS_AS(plan_write(ck, {}, std::nullopt, dcp), UsageError);

  // The same for a .pt: a streamed record read in place holds only the stream window.
  Target zip;
  zip.format = &formats::torch_file;
  zip.max_memory = 512 << 10;
  CHECK(plan_write(ck, {}, std::nullopt, zip, [](const TensorMeta&, size_t) { return true; }).records[0].need == 0);
  CHECK_THROWS_AS(plan_write(ck, {}, std::nullopt, zip), UsageError);
  // A safetensors run read in place: the copy window shrinks to fit the budget, cast included.
  Target st_small;
  st_small.max_memory = 64 << 10;
  WritePlan bf = plan_write(ck, {}, DType::BFloat16, st_small);
  CHECK(bf.records[0].window_elems == (64 << 10) / 6);
  CHECK(bf.records[0].need == (64 << 10) / 6 * 6);
  CHECK(plan_write(ck, {}, std::nullopt, Target{}).records[0].window_elems ==
        (512 << 10) / 4);  // the chunk, under 64 MiB

  // Refusals: a hole, a dtype safetensors cannot hold, an unknown dtype.
  Checkpoint holed = checkpoint({tensor("h", {8}, {{0, 4}})});
  Target st;
  CHECK_THROWS_AS(plan_write(holed, {}, std::nullopt, st), FormatError);
  Checkpoint cplx = checkpoint({tensor("c", {4}, {{0, 4}}, DType::Complex128)});
  CHECK_THROWS_AS(plan_write(cplx, {}, std::nullopt, st), UnsupportedError);
  Target pt;
  pt.format = &formats::torch_file;
  CHECK_NOTHROW(plan_write(cplx, {}, std::nullopt, pt));
  Checkpoint unknown = checkpoint({tensor("u", {4}, {{0, 4}})});
  unknown.md.tensors[0].dtype.reset();
  CHECK_THROWS_AS(plan_write(unknown, {}, std::nullopt, pt), UnsupportedError);
}

TEST_CASE("assemble: boxes from row and column shards, through an ordered and an unordered source") {
  // 8 x 6, saved out of order: rows 4..8 whole (a run), rows 0..4 split in two column halves (not
  // runs); and the same rows saved as two dim-0 runs, the second first (their pieces are ordered by
  // where they land, so an ordered source must be read in another order). The targets are a
  // reshard's dim-0 boxes of 3 rows (cutting every chunk), the whole tensor, and a box that is not
  // a run.
  std::vector<TensorMeta> ts = {tensor("w", {8, 6}, {{4, 0, 4, 6}, {0, 3, 4, 3}, {0, 0, 4, 3}}),
                                tensor("v", {8, 6}, {{4, 0, 4, 6}, {0, 0, 4, 6}})};
  for (const TensorMeta& t : ts) {
    for (bool ordered : {false, true}) {
      for (const Box& target :
           {box({0, 0}, {3, 6}), box({3, 0}, {3, 6}), box({6, 0}, {2, 6}), whole_box(t), box({2, 1}, {4, 4})}) {
        CAPTURE(t.fqn, ordered, target.offsets, target.sizes);
        MemoryChunks src(t, ordered);
        std::vector<Piece> pieces = plan_pieces(t, target);
        std::vector<float> got(target.numel(), -1.0f);
        assemble_box(src, t, target, pieces, reinterpret_cast<uint8_t*>(got.data()), ordered ? 1 : 3);
        CHECK(got == src.expected(target));
        // each piece's use of its chunk ended once; an ordered source is read in chunk order
        CHECK(src.dones.size() == pieces.size());
        CHECK(src.reads.size() == pieces.size());
        if (ordered) CHECK(std::is_sorted(src.reads.begin(), src.reads.end()));
      }
    }
    // A source that reads byte ranges: a piece that is not a run of its chunk is read as the
    // chunk's rows it spans (row_slab), not the whole chunk.
    for (const Box& target : {box({0, 0}, {3, 6}), box({3, 0}, {3, 6}), box({2, 1}, {4, 4})}) {
      CAPTURE(t.fqn, target.offsets, target.sizes);
      MemoryChunks src(t, false, true);
      std::vector<Piece> pieces = plan_pieces(t, target);
      std::vector<float> got(target.numel(), -1.0f);
      assemble_box(src, t, target, pieces, reinterpret_cast<uint8_t*>(got.data()), 1);
      CHECK(got == src.expected(target));
      uint64_t slabs = 0;
      bool sliced = false;
      for (const Piece& p : pieces) {
        const Box cb = chunk_box(t, p.chunk);
        const bool alone = p.run || run_in(p.in, cb, 4);  // a run of its chunk: read alone
        sliced = sliced || !alone;
        slabs += alone ? p.bytes : row_slab(p.in, cb).numel() * 4;
        if (!alone) CHECK(row_slab(p.in, cb).numel() < cb.numel());
      }
      CHECK(sliced == (target.offsets[1] == 1));  // the box that is not a run cuts its chunks so
      CHECK(src.bytes_read == slabs);
      CHECK(src.reads.empty());  // no chunk read whole
    }
    CHECK(row_slab(box({1, 4}, {2, 1}), box({0, 3}, {4, 3})).text() == box({1, 3}, {2, 3}).text());
    CHECK(row_slab(box({0, 1, 4}, {1, 2, 1}), box({0, 0, 3}, {1, 4, 3})).text() == box({0, 1, 3}, {1, 2, 3}).text());
    // read_full_tensor is the whole box, read in chunk order
    MemoryChunks src(t, true);
    std::vector<float> full(t.numel());
    read_full_tensor(src, t, reinterpret_cast<uint8_t*>(full.data()));
    CHECK(full == src.expected(whole_box(t)));
    std::vector<size_t> all(t.num_chunks());
    std::iota(all.begin(), all.end(), size_t{0});
    CHECK(src.reads == all);
  }
}
