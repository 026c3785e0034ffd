// The model's tensors for `accel estimate-memory` (estimate_memory.h).
#include "accelerator/estimate_memory.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace accelerate::detail {

void report_model_for_memory_estimate(const torch::nn::Module& model) {
  const char* path = std::getenv("ACCELERATE_ESTIMATE_MEMORY");
  if (path == nullptr || *path == '\0') {
    return;
  }
  std::FILE* file = std::fopen(path, "w");
  if (file == nullptr) {
    std::fprintf(stderr,
                 "accelerate: cannot write the memory estimate's report %s (ACCELERATE_ESTIMATE_MEMORY)\n",
                 path);
    std::exit(1);
  }
  for (const auto& parameter : model.named_parameters(/*recurse=*/true)) {
    std::fprintf(file, "tensor\t%s\t%lld\t%d\n", parameter.key().c_str(),
                 static_cast<long long>(parameter.value().numel()),
                 parameter.value().requires_grad() ? 1 : 0);
  }
  for (const auto& buffer : model.named_buffers(/*recurse=*/true)) {
    std::fprintf(file, "tensor\t%s\t%lld\t0\n", buffer.key().c_str(),
                 static_cast<long long>(buffer.value().numel()));
  }
  std::fputs("end\n", file);
  const bool written = std::fclose(file) == 0;
  std::fflush(nullptr);
  // Counted: the process ends here, as `accel estimate-memory` asked, whatever the program does next.
  std::exit(written ? 0 : 1);
}

} // namespace accelerate::detail
