// `.metadata` shaped as a large DCP save writes it (every tensor Shard(0) over many ranks, one
// storage entry per chunk): the folded decode (the VM's fast path for flat objects, folded
// tensors, storage_data joined into runs) must build exactly the model the generic decode builds,
// and the caps must still fire on it.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <random>
#include <string>

#include "meta/checkpoint.h"
#include "meta/metadata.h"
#include "report/inspect.h"
#include "store/file.h"
#include "write/dcp_metadata.h"

using namespace dcpctl;

namespace {

// Under a sanitizer (CI's instrumented pass, the only one that runs the unit tests) the
// equivalence cases over cuts and mutations take every third of their mutations (and of the byte
// templates' cuts) and a third of the random ones' time: ~6x slower there, this file took 73.5 s
// of that pass (21 s before the templates' cases). The first pass's corruption sweeps
// (tests/corruption/metadata_mutations.cpp) compare with and without templates on every fixture.
#if defined(__SANITIZE_ADDRESS__)
constexpr size_t kStride = 3;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr size_t kStride = 3;
#else
constexpr size_t kStride = 1;
#endif
#else
constexpr size_t kStride = 1;
#endif

// tensors x ranks chunks, as bench/make_big_metadata.py lays them out (smaller).
MetadataOut dcp_like(int tensors, int ranks) {
  MetadataOut out;
  for (int r = 0; r < ranks; ++r) out.files.push_back("__" + std::to_string(r) + "_0.distcp");
  std::vector<uint64_t> pos(static_cast<size_t>(ranks), 0);
  for (int i = 0; i < tensors; ++i) {
    MetaTensorOut t;
    t.fqn = "model.layers." + std::to_string(i / 3) + ".w" + std::to_string(i % 3) + ".weight";
    t.dtype_name = i % 2 ? "float32" : "bfloat16";
    t.requires_grad = i % 3 == 0;
    if (i % 5 == 4)
      t.shape = {37};  // 1-d, rows not a multiple of the ranks
    else if (i % 7 == 6)
      t.shape = {};  // 0-d: one chunk
    else
      t.shape = {64 + i, 16};
    int n = t.shape.empty() ? 1 : ranks;
    int64_t rows = t.shape.empty() ? 1 : t.shape[0];
    int64_t step = (rows + n - 1) / n;
    for (int r = 0; r < n; ++r) {
      MetaChunkOut c;
      if (!t.shape.empty()) {
        int64_t start = std::min<int64_t>(r * step, rows);
        c.offsets = {start};
        c.sizes = {std::max<int64_t>(0, std::min<int64_t>(step, rows - start))};
        for (size_t d = 1; d < t.shape.size(); ++d) {
          c.offsets.push_back(0);
          c.sizes.push_back(t.shape[d]);
        }
      }
      c.file = static_cast<uint32_t>(r);
      c.offset = pos[static_cast<size_t>(r)];
      c.length = 1536 + static_cast<uint64_t>(i);
      pos[static_cast<size_t>(r)] += c.length;
      t.chunks.push_back(c);
    }
    out.order.emplace_back(true, static_cast<uint32_t>(out.tensors.size()));
    out.tensors.push_back(std::move(t));
  }
  for (const char* k : {"optim.param_groups.0.lr", "train.step"}) {
    MetaBytesOut b;
    b.fqn = k;
    b.offset = pos[0];
    b.length = 1200;
    pos[0] += 1200;
    out.order.emplace_back(false, static_cast<uint32_t>(out.bytes.size()));
    out.bytes.push_back(b);
  }
  out.save_id = "0f0e0d0c-0b0a-4908-8706-050403020100";
  return out;
}

std::string report(const std::string& bytes, bool fold, bool attach = true, bool templates = true,
                   MetadataParseStats* stats = nullptr) {
  Checkpoint ck;
  ck.dir = "d";
  ck.metadata_path = "d/.metadata";
  ck.metadata_bytes = bytes.size();
  MetadataParseOptions po;
  po.fold = fold;
  po.attach = attach;
  po.byte_templates = templates;
  po.stats = stats;
  ck.md = parse_metadata(ByteSpan(bytes), ck.metadata_path, po);
  for (const auto& rel : ck.md.files) {
    DataFileInfo fi;
    fi.relative_path = rel;
    fi.size = 1u << 30;
    ck.files.push_back(fi);
  }
  InspectOptions io;
  io.chunks = true;
  return inspect_report(ck, io).dump();
}

// The report, or the error, of a parse with or without the VM's byte templates.
std::string outcome_of(const std::string& b, bool templates) {
  try {
    return report(b, true, true, templates);
  } catch (const Error& e) {
    return std::string("error: ") + e.what();
  }
}

// Every .metadata under tests/fixtures (written by real torch, 2.6 to 2.15).
std::vector<std::string> fixture_metadata() {
  std::vector<std::string> paths;
  std::function<void(const std::string&)> walk = [&](const std::string& dir) {
    for (const auto& name : list_dir(dir)) {
      std::string p = dir + "/" + name;
      if (name == ".metadata")
        paths.push_back(p);
      else if (is_directory(p))
        walk(p);
    }
  };
  walk(std::string(DCPCTL_SOURCE_DIR) + "/tests/fixtures");
  std::sort(paths.begin(), paths.end());
  return paths;
}

std::string read_all(const std::string& p) {
  MappedFile mf(p);
  return std::string(reinterpret_cast<const char*>(mf.span().data), mf.span().size);
}

}  // namespace

TEST_CASE("a DCP-shaped .metadata of many chunks decodes to the same model folded and generic") {
  MetadataOut out = dcp_like(60, 24);
  std::string bytes = metadata_pickle(out);
  std::string folded = report(bytes, true);
  CHECK(folded == report(bytes, false));
  CHECK(folded == report(bytes, true, false));

  MetadataParseStats st;
  MetadataParseOptions po;
  po.stats = &st;
  Metadata md = parse_metadata(ByteSpan(bytes), "d/.metadata", po);
  CHECK(st.parses == 1);  // every storage entry attached while decoding, and that held
  REQUIRE(md.tensors.size() == 60);
  CHECK(md.problems.empty());
  CHECK(md.files.size() == 24);
  size_t chunks = 0;
  for (const auto& t : md.tensors) {
    chunks += t.num_chunks();
    for (size_t c = 0; c < t.num_chunks(); ++c) CHECK(t.storage[c].present());
  }
  size_t want = 0;
  for (const auto& t : out.tensors) want += t.chunks.size();
  CHECK(chunks == want);
  const TensorMeta& t1 = md.tensors[1];
  CHECK(t1.dtype_name == "float32");
  CHECK(t1.shape == std::vector<int64_t>{65, 16});
  CHECK(t1.chunk_offsets(3)[0] == 9);  // ceil(65 / 24) = 3 rows a rank
  CHECK(t1.chunk_sizes(3)[1] == 16);
  CHECK(md.files[t1.storage[3].file] == "__3_0.distcp");
  CHECK(t1.storage[3].length == 1537);
  REQUIRE(md.bytes.size() == 2);
  CHECK(md.bytes[1].storage.present());
  CHECK(md.bytes[1].storage.length == 1200);

  // Files in a different order for every tensor, some named by several chunks in a row (the
  // folder's interning guesses the next file from the order it saw last): still the same model.
  MetadataOut mixed = dcp_like(30, 12);
  for (size_t i = 0; i < mixed.tensors.size(); ++i)
    for (size_t r = 0; r < mixed.tensors[i].chunks.size(); ++r)
      mixed.tensors[i].chunks[r].file = static_cast<uint32_t>(i % 4 == 0 ? r / 5 : (r * 7 + i * 3) % 12);
  std::string mixed_bytes = metadata_pickle(mixed);
  CHECK(report(mixed_bytes, true) == report(mixed_bytes, false));
  CHECK(report(mixed_bytes, true) == report(mixed_bytes, true, false));
  Metadata mm = parse_metadata(ByteSpan(mixed_bytes), "d/.metadata");
  REQUIRE(mm.tensors.size() == mixed.tensors.size());
  for (size_t i = 0; i < mm.tensors.size(); ++i)
    for (size_t r = 0; r < mm.tensors[i].num_chunks(); ++r)
      CHECK(mm.files[mm.tensors[i].storage[r].file] == mixed.files[mixed.tensors[i].chunks[r].file]);
}

TEST_CASE("every cut and many mutations of a DCP-shaped .metadata: the folded decode never accepts more") {
  // What tests/corruption/metadata_mutations.cpp asks of real torch files, on this shape: when the
  // folded decode succeeds, the generic one succeeds with the same report. (The folded decode
  // may refuse a little more: a second BUILD on a folded record is refused at once, while the
  // generic path overwrites the state; and the expansion budget is charged a little
  // differently.) Cuts fail identically.
  std::string bytes = metadata_pickle(dcp_like(6, 5));
  auto outcome = [](const std::string& b, bool fold, bool attach = true) -> std::string {
    try {
      return report(b, fold, attach);
    } catch (const Error& e) {
      return std::string("error: ") + e.what();
    }
  };
  for (size_t n = 0; n < bytes.size(); n += 3) {
    std::string cut = bytes.substr(0, n);
    INFO("cut at " << n);
    CHECK(outcome(cut, true) == outcome(cut, false));
    CHECK(outcome(cut, true) == outcome(cut, true, false));
  }
  for (size_t i = 0; i < bytes.size(); i += 5 * kStride)
    for (char op : {'\x94', 'h', 'j', 'K', 'M', 'u', 'b', '\x86', '\x85', ')', 'N', '(', 'R', '\x81', '}'}) {
      std::string m = bytes;
      m[i] = op;
      INFO("byte " << i << " set to " << static_cast<int>(static_cast<unsigned char>(op)));
      std::string f = outcome(m, true);
      // Storage entries attached while decoding, or not: the same outcome, errors included.
      CHECK(f == outcome(m, true, false));
      CHECK(f == outcome_of(m, false));  // the byte templates: the same outcome, errors included
      if (f.rfind("error: ", 0) == 0) continue;
      CHECK(f == outcome(m, false));
    }
}

TEST_CASE(
    "every fixture's .metadata (written by real torch): storage attached while decoding, parsed once, the same model") {
  // The fixtures' torch writes a first MetadataIndex the folder declines (its class is defined in
  // place, without an offset attribute in some releases), after which key and storage records
  // are out of step: attaching must not need them in step, or every such file is parsed twice.
  const std::vector<std::string> paths = fixture_metadata();
  REQUIRE(paths.size() >= 40);
  for (const auto& p : paths) {
    INFO(p);
    MappedFile mf(p);
    std::string bytes(reinterpret_cast<const char*>(mf.span().data), mf.span().size);
    MetadataParseStats st;
    MetadataParseOptions po;
    po.stats = &st;
    Metadata md = parse_metadata(ByteSpan(bytes), p, po);
    CHECK(st.parses == 1);
    CHECK(report(bytes, true) == report(bytes, true, false));
  }
}

TEST_CASE("byte templates: torch's records of every fixture are read from templates, the same as the flat path") {
  // Each fixture's objects of one class after its first are torch's same opcodes again: read from
  // the template the first one made (pickle/vm.cpp), never declined, and the model is the same
  // as without templates. A wrong value read from a template changes the report.
  std::vector<std::string> paths = fixture_metadata();
  REQUIRE(paths.size() >= 40);
  uint64_t hits = 0, generic = 0, declined = 0;
  for (const auto& p : paths) {
    INFO(p);
    std::string bytes = read_all(p);
    MetadataParseStats st, off;
    MetadataParseOptions po;
    po.stats = &st;
    (void)parse_metadata(ByteSpan(bytes), p, po);
    po.stats = &off;
    po.byte_templates = false;
    (void)parse_metadata(ByteSpan(bytes), p, po);
    CHECK(off.flat_template == 0);
    // The same objects folded either way; a template only replaces the opcode walk.
    CHECK(st.flat_template + st.flat_generic == off.flat_generic);
    CHECK(st.flat_declined == off.flat_declined);
    // Fixtures of more than a few chunks: most records come from templates.
    if (st.flat_template + st.flat_generic >= 40) CHECK(st.flat_template * 2 >= st.flat_generic);
    CHECK(report(bytes, true, true, true) == report(bytes, true, true, false));
    hits += st.flat_template;
    generic += st.flat_generic;
    declined += st.flat_declined;
  }
  UNSCOPED_INFO("template " << hits << ", flat " << generic << ", declined " << declined);
  CHECK(hits > generic);

  // The DCP-shaped file of many chunks: every chunk, key and storage record after the first few
  // of each byte shape is read from a template.
  std::string big = metadata_pickle(dcp_like(60, 24));
  MetadataParseStats st, off;
  MetadataParseOptions po;
  po.stats = &st;
  (void)parse_metadata(ByteSpan(big), "d/.metadata", po);
  po.stats = &off;
  po.byte_templates = false;
  (void)parse_metadata(ByteSpan(big), "d/.metadata", po);
  CHECK(st.flat_template > 20 * st.flat_generic);
  CHECK(st.flat_template + st.flat_generic == off.flat_generic);
  CHECK(st.flat_declined == off.flat_declined);
}

TEST_CASE("byte templates: random mutations of real torch files and a DCP-shaped one read the same as without") {
  // A few seconds of random byte mutations (1-4 bytes each: opcodes, ints, memo indices, string
  // lengths) of every fixture's .metadata and a DCP-shaped file: with templates and without, the
  // same report or the same error. Deterministic seeds; the mutation count is bounded by time.
  std::vector<std::string> inputs;
  for (const auto& p : fixture_metadata()) inputs.push_back(read_all(p));
  inputs.push_back(metadata_pickle(dcp_like(8, 6)));
  std::mt19937_64 rng(72);
  const uint8_t ops[] = {0x94, 'h', 'j',  'K', 'M',  'J',  0x8a, 'u', 'b', 0x86, 0x85, ')', 'N',
                         '(',  'R', 0x81, '}', 0x8c, 0x88, 0x89, 'e', ']', 't',  'q',  'r', 0x93};
  auto t0 = std::chrono::steady_clock::now();
  size_t runs = 0, errors = 0;
  while (runs < 200 || std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(3000 / kStride)) {
    const std::string& base = inputs[rng() % inputs.size()];
    if (base.empty()) continue;
    std::string m = base;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      size_t at = rng() % m.size();
      switch (rng() % 3) {
        case 0: m[at] = static_cast<char>(ops[rng() % sizeof ops]); break;
        case 1: m[at] = static_cast<char>(rng()); break;
        default: m[at] = static_cast<char>(m[at] + (rng() % 2 ? 1 : -1)); break;
      }
    }
    std::string with = outcome_of(m, true), without = outcome_of(m, false);
    if (with != without) {
      FAIL_CHECK("mutation " << runs << " differs:\n  with templates: " << with.substr(0, 300)
                             << "\n  without: " << without.substr(0, 300));
    }
    errors += with.rfind("error: ", 0) == 0;
    ++runs;
    if (runs > 100000) break;
  }
  UNSCOPED_INFO(runs << " mutations, " << errors << " refused");
  CHECK(runs >= 200);
}

// The VM's byte templates (pickle/vm.cpp) only step over what the opcode-by-opcode walk would
// have read the same way: with and without them, the same memo entries found read back by the
// scan, and the same report or the same error.
TEST_CASE("byte templates: the same memo entries read back and the same report, on every cut, mutation and fixture") {
  auto outcome = [](const std::string& b, bool templates, uint64_t* kept = nullptr) -> std::string {
    MetadataParseStats st;
    try {
      std::string r = report(b, true, true, templates, &st);
      if (kept) *kept = st.memo_kept;
      return r;
    } catch (const Error& e) {
      return std::string("error: ") + e.what();
    }
  };
  // The fixture whose scan steps over the most objects by templates (real torch's bytes; dcpctl's
  // own writer memoizes less than torch's pickler, and its objects' heads are not the pattern the
  // scan takes), then every fifth cut and some mutations of it (a few CPU seconds).
  std::string bytes;
  uint64_t most = 0, templated = 0;
  for (const auto& p : fixture_metadata()) {
    INFO(p);
    std::string fb = read_all(p);
    MetadataParseStats on, off;
    CHECK(report(fb, true, true, true, &on) == report(fb, true, true, false, &off));
    CHECK(on.memo_kept == off.memo_kept);
    CHECK(off.scan_templated == 0);
    templated += on.scan_templated;
    if (on.scan_templated > most && fb.size() < (12u << 10)) {
      most = on.scan_templated;
      bytes = fb;
    }
  }
  CHECK(templated > 0);  // torch's objects are stepped over by templates
  REQUIRE(most >= 8);
  for (size_t n = 0; n < bytes.size(); n += 5 * kStride) {
    std::string cut = bytes.substr(0, n);
    INFO("cut at " << n);
    uint64_t a = 1, b = 2;
    std::string with = outcome(cut, true, &a);
    CHECK(with == outcome(cut, false, &b));
    if (with.rfind("error: ", 0) != 0) CHECK(a == b);
  }
  for (size_t i = 0; i < bytes.size(); i += 11 * kStride)
    for (char op : {'\x94', 'h', 'j', 'K', 'M', 'J', '\x8c', 'u', 'b', '(', '\x95', '\xff'}) {
      std::string m = bytes;
      m[i] = op;
      INFO("byte " << i << " set to " << static_cast<int>(static_cast<unsigned char>(op)));
      uint64_t a = 1, b = 2;
      std::string with = outcome(m, true, &a);
      CHECK(with == outcome(m, false, &b));
      if (with.rfind("error: ", 0) != 0) CHECK(a == b);
    }
}
