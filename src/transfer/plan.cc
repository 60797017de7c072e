#include "transfer/plan.h"

namespace kvferry::transfer {

std::vector<DescriptorPair> MergeAdjacent(const DescriptorList& local,
                                          const DescriptorList& remote) {
  std::vector<DescriptorPair> out;
  out.reserve(local.size());
  for (size_t i = 0; i < local.size() && i < remote.size(); ++i) {
    if (!out.empty()) {
      DescriptorPair& last = out.back();
      if (last.local.region == local[i].region && last.remote.region == remote[i].region &&
          last.local.offset + last.local.length == local[i].offset &&
          last.remote.offset + last.remote.length == remote[i].offset) {
        last.local.length += local[i].length;
        last.remote.length += remote[i].length;
        continue;
      }
    }
    out.push_back({local[i], remote[i]});
  }
  return out;
}

}  // namespace kvferry::transfer
