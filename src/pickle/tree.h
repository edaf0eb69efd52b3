// Tree: the arenas that own what a decoded pickle's Values point to.
#pragma once

#include <algorithm>
#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "pickle/value.h"

namespace dcpctl::pickle {

// Bump allocation in blocks that never move, so pointers into them stay valid.
template <class T>
class BlockArena {
 public:
  // Blocks start at kFirstBlock elements and double up to `block_elems`: a small pickle (an item's
  // data.pkl, parsed once per chunk read) then costs a few KiB, not a full block to allocate and
  // initialize (128 KiB of values: most of a 512,000-item reshard's CPU time once).
  static constexpr size_t kFirstBlock = 64;
  explicit BlockArena(size_t block_elems)
      : block_elems_(block_elems), next_elems_(std::min(kFirstBlock, block_elems)) {}
  T* alloc(size_t n) {
    if (n > left_) {
      size_t sz = n > next_elems_ ? n : next_elems_;
      next_elems_ = std::min(next_elems_ * 2, block_elems_);
      blocks_.push_back(std::make_unique<T[]>(sz));
      cur_ = blocks_.back().get();
      left_ = sz;
      reserved_ += sz * sizeof(T);
    }
    T* p = cur_;
    cur_ += n;
    left_ -= n;
    return p;
  }
  size_t bytes_reserved() const { return reserved_; }
  // Gives back [p, p + n) if it is the most recent allocation (a value built and consumed at
  // once, like the argument tuple of torch.Size); anything else stays until the arena goes.
  void release_tail(T* p, size_t n) {
    if (cur_ && p + n == cur_ && n <= static_cast<size_t>(cur_ - blocks_.back().get())) {
      cur_ = p;
      left_ += n;
    }
  }

 private:
  std::vector<std::unique_ptr<T[]>> blocks_;
  T* cur_ = nullptr;
  size_t left_ = 0;
  size_t block_elems_, next_elems_;
  size_t reserved_ = 0;
};

// A container still being filled (or one the memo may refer to again, which we never freeze).
struct OpenContainer {
  std::vector<Value> items;
  bool pinned = false;
};

class Tree {
 public:
  Tree() : bytes_(1 << 16), values_(1 << 13), objects_(1 << 10) {}
  Tree(const Tree&) = delete;
  Tree& operator=(const Tree&) = delete;

  Value root;

  // Every distinct global the pickle named, in order of first appearance. Nothing was imported.
  const std::vector<const GlobalRef*>& globals() const { return global_list_; }
  size_t bytes_reserved() const;

  // --- construction, used by the VM ---
  Value make_str(Kind kind, std::string_view s);
  Value make_frozen(Kind kind, const Value* items, size_t n);
  Value make_open(Kind kind);
  Value make_global(std::string_view module, std::string_view name);
  Value make_object(const Value& callable, const Value& args);
  Value make_persid(const Value& pid);
  OpenContainer& open(const Value& v) { return *reinterpret_cast<OpenContainer*>(v.bits); }
  // Copies an unpinned open container into frozen storage and recycles its vector.
  Value freeze(const Value& v);
  // `v` is no longer referenced by the caller: recycles an open container, or returns a frozen
  // one's storage if it was the last thing allocated. Values held by the memo are left alone.
  void discard(const Value& v);

 private:
  BlockArena<char> bytes_;
  BlockArena<Value> values_;
  BlockArena<ObjectNode> objects_;
  std::deque<OpenContainer> open_;
  std::vector<OpenContainer*> free_open_;
  std::deque<GlobalRef> global_nodes_;
  std::map<std::pair<std::string, std::string>, const GlobalRef*> global_index_;
  std::vector<const GlobalRef*> global_list_;
};

}  // namespace dcpctl::pickle
