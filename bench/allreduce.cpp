// All-reduce time by tensor size on the job's CPU process group, as training sees it (Accelerator::reduce,
// sum): run under `accel launch --cpu --num_processes N`; bench/allreduce.py alternates the shared-memory
// path and Gloo (ACCELERATE_SHM_ALLREDUCE=1 / 0) and prints them side by side.
#include <accelerate/accelerate.h>

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  int iterations = 50;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--iterations") {
      iterations = std::max(1, std::atoi(argv[i + 1]));
    }
  }
  at::set_num_threads(1);
  accelerate::Accelerator accelerator(accelerate::AcceleratorOptions().cpu(true));
  const std::vector<int64_t> sizes = {1 << 10, 64 << 10, 256 << 10, 675 << 10, 4 << 20, 16 << 20}; // floats
  for (int64_t numel : sizes) {
    auto tensor = torch::full({numel}, static_cast<float>(accelerator.process_index() + 1));
    for (int warmup = 0; warmup < 3; ++warmup) {
      accelerator.reduce(tensor);
    }
    std::vector<double> times;
    for (int i = 0; i < iterations; ++i) {
      accelerator.wait_for_everyone();
      const auto start = std::chrono::steady_clock::now();
      auto sum = accelerator.reduce(tensor);
      times.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
      const float expected = accelerator.num_processes() * (accelerator.num_processes() + 1) / 2.0f;
      if (sum[numel - 1].item<float>() != expected) {
        std::fprintf(stderr, "wrong sum for %lld elements\n", static_cast<long long>(numel));
        return 1;
      }
    }
    std::sort(times.begin(), times.end());
    if (accelerator.is_main_process()) {
      std::printf("allreduce bytes=%lld median_us=%.1f\n", static_cast<long long>(numel * 4),
                  times[times.size() / 2]);
    }
  }
  return 0;
}
