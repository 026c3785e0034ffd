// Local stub of tqdm-cpp: tqdm::range(begin, end) iterates the integers, without a progress bar.
#pragma once
#include <vector>
namespace tqdm {
inline std::vector<int> range(int begin, int end) {
  std::vector<int> values;
  for (int i = begin; i < end; ++i)
    values.push_back(i);
  return values;
}
} // namespace tqdm
