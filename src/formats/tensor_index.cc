#include "kvferry/formats/tensor_index.h"

#include <utility>

namespace kvferry::formats {

StatusOr<TensorIndex> TensorIndex::Build(std::vector<TensorView> tensors, std::string where) {
  TensorIndex index;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!index.by_name_.emplace(tensors[i].name, i).second) {
      return DataLossError("'" + where + "': two tensors are named '" + tensors[i].name + "'");
    }
  }
  index.tensors_ = std::move(tensors);
  index.where_ = std::move(where);
  return index;
}

const TensorView* TensorIndex::Find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

StatusOr<const TensorView*> TensorIndex::Get(std::string_view name) const {
  const TensorView* t = Find(name);
  if (t == nullptr) {
    return NotFoundError("'" + where_ + "' has no tensor '" + std::string(name) + "'");
  }
  return t;
}

}  // namespace kvferry::formats
