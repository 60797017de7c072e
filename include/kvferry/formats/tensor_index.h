// TensorIndex: the tensors of a file or model in order, and a lookup by name; what
// SafetensorsFile, SafetensorsModel and GgufFile hold and forward to.
//
// Thread-safety: immutable after Build.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kvferry/common/status.h"
#include "kvferry/formats/tensor.h"

namespace kvferry::formats {

class TensorIndex {
 public:
  TensorIndex() = default;

  // DataLoss when two tensors share a name; `where` names the file or model in errors.
  static StatusOr<TensorIndex> Build(std::vector<TensorView> tensors, std::string where);

  const std::vector<TensorView>& tensors() const { return tensors_; }
  // nullptr when absent.
  const TensorView* Find(std::string_view name) const;
  // NotFound naming the tensor and `where` when absent.
  StatusOr<const TensorView*> Get(std::string_view name) const;

 private:
  std::vector<TensorView> tensors_;
  std::map<std::string, size_t, std::less<>> by_name_;
  std::string where_;
};

}  // namespace kvferry::formats
