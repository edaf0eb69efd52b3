// The `dcp` format (reshard and cast): a DCP checkpoint. Each target rank's file holds its chunks,
// one torch.save blob each (rank 0's file first holds the non-tensor items, copied as they are),
// then `.metadata` last, as DCP writes it, so a checkpoint without it is visibly incomplete. Under
// torchrun each process writes the rank files dealt to it into rank 0's temporary directory and
// tells rank 0 where each chunk landed. A format built on it (DcpAdditions) adds items made in
// memory, a folder the checkpoint lies in and files beside .metadata.
#include "write/formats/dcp_checkpoint.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "dist/group.h"
#include "item/item_reader.h"
#include "pickle/pickler.h"
#include "plan/format.h"
#include "util/failpoint.h"
#include "util/sha256.h"
#include "view/codecs/quantized.h"
#include "write/assets.h"
#include "write/dcp_metadata.h"
#include "write/execute.h"
#include "write/executor.h"
#include "write/output.h"
#include "write/reshard.h"
#include "write/resume.h"
#include "write/stream.h"
#include "write/torch_save.h"
#include "write/write_hash.h"

namespace dcpctl {

using nlohmann::json;

namespace {

// --quantize: the quantized tensors' codec is read from a quantization_config, never guessed from
// their byte width (view/codecs/quantized.h), so the checkpoint gets a config.json beside .metadata, the
// source's (found as the quantize view found it) with the quantization_config the view wrote
// (view/codecs/quantize.h): dequantizing it later, or exporting it as an HF folder, reads the same codec.
DcpAdditions quantized_config_file(const WriteJob& job) {
  DcpAdditions add;
  const Checkpoint& ck = job.request.ck;
  if (!ck.derived || !ck.derived->output.quantization_config) return add;
  const ModelConfig& model = job.request.model.config();
  const MapConfig config = model.saved(ck);
  const std::string text = config.json.is_null() ? "{}" : model.file(config.path)->text;
  add.files.push_back({"config.json", quantized_config(text, *ck.derived->output.quantization_config)});
  for (const auto& [name, file_text] : ck.derived->output.quantization_files) add.files.push_back({name, file_text});
  return add;
}

class DcpCheckpoint final : public OutputWriter, FileSink {
 public:
  DcpCheckpoint(const ReshardOptions& o, DcpAdd add) : o_(o), add_(std::move(add)) {}
  const char* name() const override { return "reshard"; }
  bool decode_once() const override { return true; }

  void planned(WriteJob& job, json& summary) override {
    const WritePlan& plan = job.plan;
    const int world = static_cast<int>(plan.files.size());
    if (add_) extra_ = add_(job);
    const size_t values = plan.values.size() + extra_.items.size();
    summary["layout"] = o_.layout == Layout::Keep ? "keep" : "fsdp";
    summary["world_size"] = world;
    summary["non_tensor_items"] = values;
    json ranks = json::array();
    for (int r = 0; r < world; ++r) {
      const PlannedFile& f = plan.files[static_cast<size_t>(r)];
      ranks.push_back({{"rank", r},
                       {"file", f.name},
                       {"chunks", f.records.size()},
                       {"tensor_bytes", f.data_bytes},
                       {"non_tensor_items", r == 0 ? values : 0}});
    }
    summary["ranks"] = ranks;
    describe_metadata(job);
  }

  // The rank files of a checkpoint written by one process are journaled (write/resume.h), each
  // by the records it holds; not in a folder of its own (--iteration), which the journal's
  // folder would not hold whole.
  json journal_files(const WriteJob& job) const override {
    const WritePlan& plan = job.plan;
    if (!extra_.subdir.empty() || plan.files.size() < 2) return nullptr;
    json files = json::object();
    for (const PlannedFile& f : plan.files) {
      json records = json::array();
      for (size_t ri : f.records) {
        const Record& r = plan.records[ri];
        records.push_back(
            {plan.tensors[r.tensor].key, torch_name(plan.tensors[r.tensor].dst), r.box.offsets, r.box.sizes});
      }
      files[f.name] = Sha256::of(records.dump());
    }
    return {{"files", files}, {"options", json::object()}};
  }

  // Rank 0 makes the temporary directory every process writes into (taking over a stopped run's).
  std::string set_up(WriteJob& job) override {
    dir_ = std::make_unique<OutputDir>(o_.output, job.uploads, job.journal ? job.journal->from() : "");
    if (job.journal) keep_finished(job);
    if (!extra_.subdir.empty() && !dir_->remote() && ::mkdir(dir_->path_of(extra_.subdir).c_str(), 0755) != 0)
      throw IoError(Where(dir_->path_of(extra_.subdir)),
                    std::string("cannot create the checkpoint's folder: ") + std::strerror(errno));
    return dir_->temp_path();
  }

  void write(WriteJob& job, Executor& ex, const std::string& dir_path) override {
    job_ = &job;
    dir_path_ = dir_path;
    uploads = job.uploads;
    ex.write(job.deal, job.me, *this);
    if (job.group && !job.leader) {
      // Tell rank 0 where this process's chunks landed: [record, offset, length].
      const WritePlan& plan = job.plan;
      json locs = json::array();
      for (size_t r : job.deal.files_of(job.me))
        for (size_t ri : plan.files[r].records)
          locs.push_back({ri, chunk_out(plan, ri).offset, chunk_out(plan, ri).length});
      job.group->publish("locs/" + std::to_string(job.me), locs.dump());
    }
  }

  void commit(WriteJob& job) override {
    for (int p = 1; job.group && p < job.group->size(); ++p)
      for (const auto& l : json::parse(job.group->fetch("locs/" + std::to_string(p)))) {
        size_t ri = l.at(0).get<size_t>();
        if (ri >= job.plan.records.size())
          throw IoError(Where(), "rank " + std::to_string(p) + " reported a chunk outside the plan");
        MetaChunkOut& mc = chunk_out(job.plan, ri);
        mc.offset = l.at(1).get<uint64_t>();
        mc.length = l.at(2).get<uint64_t>();
      }
    for (const auto& [path, content] : extra_.files) {
      OutputFile f(dir_->temp_path() + "/" + path, job.uploads);
      f.append(content.data(), content.size());
      f.commit();
    }
    // .metadata last: a checkpoint without it is visibly incomplete.
    std::string pkl = metadata_pickle(mo_);
    {
      OutputFile meta(dir_->temp_path() + "/" + inside(".metadata"), job.uploads);
      meta.append(pkl.data(), pkl.size());
      meta.commit();
    }
    if (job.journal) job.journal->remove();        // not part of the output
    if (seal) seal(dir_->temp_path(), o_.output);  // the manifest, last
    dir_->commit();
  }

 private:
  OutputFile& file(size_t) override {
    throw std::logic_error("a DCP checkpoint's rank files are created by their writers");
  }
  std::unique_ptr<OutputFile> create(size_t rank) override {
    auto out = std::make_unique<OutputFile>(dir_path_ + "/" + inside(job_->plan.files[rank].name), job_->uploads);
    if (journal_) out->keep_located_parts();
    return out;
  }
  bool kept(size_t rank) const override { return journal_ && journal_->kept(job_->plan.files[rank].name); }
  // A journaled rank file written (write/resume.h): its digest, where its chunks landed and where
  // its tensors' parts lie. Rank 0's, which holds the non-tensor items, is written again by a run
  // that resumes.
  void written(size_t rank, OutputFile& out) override {
    if (!journal_) return;
    const PlannedFile& f = job_->plan.files[rank];
    if (rank == 0) return journal_->rewrote(f.name);
    json placed = json::array(), parts = json::array();
    for (size_t ri : f.records)
      placed.push_back({ri, chunk_out(job_->plan, ri).offset, chunk_out(job_->plan, ri).length});
    for (const auto& [p, at] : out.located_parts()) parts.push_back({p.tensor, p.part, at});
    std::optional<FileDigest> d = out.digest();
    if (!d) d = digest_files(out.final_path(), 1, nullptr, nullptr, o_.manifest).begin()->second;
    journal_->finished(f.name, *d, {{"placed", placed}, {"parts", parts}});
    dir_->keep_when_stopped();
    failpoint_stop(("finished/" + f.name).c_str());  // tests: killed with this file finished
  }
  // The rank files a stopped run finished: kept as they are, their chunks' places and tensor parts
  // as it recorded them, their digests the manifest's.
  void keep_finished(WriteJob& job) {
    journal_ = job.journal;
    journal_->start(dir_->temp_path());
    for (const PlannedFile& f : job.plan.files) {
      if (!journal_->kept(f.name)) continue;
      const std::string path = dir_->path_of(f.name);
      const json extra = journal_->kept_extra(f.name);
      for (const json& p : extra.at("placed")) {
        MetaChunkOut& mc = chunk_out(job.plan, p.at(0).get<size_t>());
        mc.offset = p.at(1).get<uint64_t>();
        mc.length = p.at(2).get<uint64_t>();
      }
      for (const json& p : extra.at("parts"))
        locate_part(HashPart{p.at(0).get<std::string>(), p.at(1).get<uint32_t>()}, path, path, p.at(2).get<uint64_t>());
      record_written_digest(path, *journal_->kept_digest(f.name), 0);
      dir_->keep_when_stopped();
    }
  }
  std::string inside(const std::string& name) const {
    return extra_.subdir.empty() ? name : extra_.subdir + "/" + name;
  }
  // Non-tensor items first, in rank 0's file, as DCP writes them: their bytes (and transforms)
  // unchanged.
  void lead(size_t rank, OutputFile& out, StreamWindow& win) override {
    if (rank != 0) return;
    const WritePlan& plan = job_->plan;
    const Metadata& md = job_->request.ck.md;
    for (size_t b = 0; b < plan.values.size(); ++b) {
      const BytesMeta& bm = md.bytes[plan.values[b]->index];
      MetaBytesOut& mb = mo_.bytes[b];
      mb.fqn = plan.values[b]->key;
      mb.file = 0;
      mb.offset = out.appended();
      if (const auto r = extra_.replaced.find(mb.fqn); r != extra_.replaced.end()) {
        mb.length = r->second.size();
        out.append(r->second.data(), r->second.size());
        continue;
      }
      if (bm.storage.format == ItemFormat::Raw) {
        // A value stored as itself (torch_checkpointing's JSON and raw items): DCP keeps it as
        // torch.save of the Python value, what the source's own load returns.
        Pickler p(2);
        if (!p.value(job_->reader.read_bytes(bm)->root))
          throw UnsupportedError(Where(job_->request.ck.path_of(bm.storage.file), std::nullopt, bm.fqn),
                                 "a value dcpctl cannot re-pickle");
        p.stop();
        const std::vector<uint8_t> blob = torch_save_object_blob(p.data());
        mb.length = blob.size();
        out.append(blob.data(), blob.size());
        continue;
      }
      mb.length = bm.storage.length;
      mb.transforms = md.transform_sets.at(bm.storage.transforms);
      // Copied as they are (still encoded), through the stream window (past the page cache
      // with --io direct): a large non-tensor item costs no more memory than a small one. The
      // copy's reads check the CRC-32 of every record in the item.
      const ReadFile& in = job_->reader.watched_item_file(bm);
      stream_runs(out, {{&in, bm.storage.offset, bm.storage.length, bm.fqn}}, DType::UInt8, DType::UInt8, win);
    }
    for (size_t i = 0; i < extra_.items.size(); ++i) {
      const auto& [key, blob] = extra_.items[i];
      MetaBytesOut& mb = mo_.bytes[plan.values.size() + i];
      mb.fqn = key;
      mb.file = 0;
      mb.offset = out.appended();
      mb.length = blob.size();
      out.append(blob.data(), blob.size());
    }
  }
  void placed(size_t ri, uint64_t offset, uint64_t length) override {
    chunk_out(job_->plan, ri).offset = offset;
    chunk_out(job_->plan, ri).length = length;
  }

  // The output's .metadata as far as the plan tells it; where each chunk lands is filled in as
  // it is written.
  void describe_metadata(const WriteJob& job) {
    const WritePlan& plan = job.plan;
    mo_.save_id = uuid4();
    mo_.checkpoint_id = extra_.subdir.empty() ? o_.output : o_.output + "/" + extra_.subdir;
    for (const PlannedFile& f : plan.files) mo_.files.push_back(f.name);
    mo_.tensors.resize(plan.tensors.size());
    part_.resize(plan.records.size());
    for (size_t i = 0; i < plan.tensors.size(); ++i) {
      const PlannedTensor& pt = plan.tensors[i];
      MetaTensorOut& mt = mo_.tensors[i];
      mt.fqn = pt.key;
      mt.dtype_name = torch_name(pt.dst);
      mt.requires_grad = pt.t->requires_grad;
      mt.shape = pt.t->shape;
      mt.chunks.resize(pt.records.size());
      for (size_t c = 0; c < pt.records.size(); ++c) {
        const Record& r = plan.records[pt.records[c]];
        part_[pt.records[c]] = c;
        mt.chunks[c].offsets = r.box.offsets;
        mt.chunks[c].sizes = r.box.sizes;
        mt.chunks[c].file = r.dest;
      }
    }
    mo_.bytes.resize(plan.values.size() + extra_.items.size());
    size_t ti = 0, bi = 0;
    for (const auto& it : plan.items) {
      if (it.tensor) {
        if (ti < plan.tensors.size() && plan.tensors[ti].key == it.key)
          mo_.order.emplace_back(true, static_cast<uint32_t>(ti++));
      } else {
        mo_.order.emplace_back(false, static_cast<uint32_t>(bi++));
      }
      if (!it.path.empty() && job.request.ck.md.has_planner_data) mo_.planner_data[it.key] = it.path;
    }
    for (size_t i = 0; i < extra_.items.size(); ++i) mo_.order.emplace_back(false, static_cast<uint32_t>(bi++));
  }
  MetaChunkOut& chunk_out(const WritePlan& plan, size_t ri) {
    return mo_.tensors[plan.records[ri].tensor].chunks[part_[ri]];
  }

  const ReshardOptions& o_;
  DcpAdd add_;
  DcpAdditions extra_;
  MetadataOut mo_;
  std::vector<size_t> part_;  // a record's index among its tensor's chunks
  std::unique_ptr<OutputDir> dir_;
  const WriteJob* job_ = nullptr;
  std::string dir_path_;              // rank 0's temporary directory
  ResumeJournal* journal_ = nullptr;  // a journaled checkpoint's (write/resume.h)
};

}  // namespace

std::unique_ptr<OutputWriter> dcp_writer(const ReshardOptions& o, DcpAdd add) {
  return std::make_unique<DcpCheckpoint>(o, std::move(add));
}

const Format formats::dcp = dcp_row();

Format dcp_row() {
  Format f;
  f.name = "dcp";
  f.writing = Writing::RankFiles;
  f.writes_values = true;
  f.folder = true;
  f.file_name = [](size_t rank, size_t) { return "__" + std::to_string(rank) + "_0.distcp"; };
  // Each rank file being written holds the part it fills and the one going out.
  f.part_buffers = [](size_t files, unsigned, unsigned threads) {
    unsigned at_once = static_cast<unsigned>(std::min<size_t>(std::max(1u, threads), files));
    return PartBuffers{2 * at_once, at_once};
  };
  f.reshard_writer = [](const ReshardOptions& o) {
    return dcp_writer(o, [](const WriteJob& job) { return quantized_config_file(job); });
  };
  return f;
}

}  // namespace dcpctl
