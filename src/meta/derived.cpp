#include "meta/derived.h"

namespace dcpctl {

const DerivedTable::Entry* DerivedTable::find(const std::string& fqn) const {
  auto it = tensors.find(fqn);
  return it == tensors.end() ? nullptr : &it->second;
}

uint64_t DerivedTable::working_bytes(const TensorMeta& t, size_t chunk) const {
  const Entry* e = find(t.fqn);
  return e ? e->tensor->working_bytes(chunk) : 0;
}

std::shared_ptr<DerivedTable> table_over(const std::shared_ptr<const DerivedTable>& below,
                                         const std::function<std::string(const std::string&)>& rename) {
  auto table = std::make_shared<DerivedTable>();
  if (!below) return table;
  table->views = below->views;
  table->output = below->output;
  for (const auto& [name, entry] : below->tensors) {
    std::string to = rename ? rename(name) : name;
    if (!to.empty()) table->tensors.emplace(std::move(to), entry);
  }
  return table;
}

}  // namespace dcpctl
