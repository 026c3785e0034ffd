// Loader throughput of a prepared loader against libtorch's make_data_loader, 1 process, side by side.
//
//   bench_data_loader [--batches N] [--batch-size B] [--reps R] [--workers 0,1,2] [--cuda]
//
// A loader-bound workload: each sample is "decoded" (a 3×96×96 image of bytes drawn from the sample's
// generator, converted to float and normalised) and augmented (a random 64×64 crop, a random horizontal flip,
// brightness jitter and a 3×3 blur), then batches of B are stacked; the loop only sums each batch. Each
// repetition reads one epoch of N batches through (a) libtorch's loader and (b) the prepared loader at every
// worker count, alternating which goes first; prints the median batches per second of each, b/a, and b's rate
// against its own workers(0). One intra-op thread: the workers are the only parallelism.
//
// --cuda (scripts/gpu-check.sh, stage data-loader): on the CUDA device, with AcceleratorOptions::non_blocking
// and 2 workers, batches collated into pinned memory (copied on the loader's side stream) must arrive equal
// to the ones read on the CPU (PASS/FAIL lines), and the loop's rate with pin_memory off and on is printed, a
// small matmul per batch as the compute.
#include <accelerate/accelerate.h>

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

/// Synthetic images, decoded and augmented in get(): the same work for both loaders (the generator is the
/// documented per-sample one, seeded explicitly so libtorch's loader can use it too).
class ImageDataset : public torch::data::datasets::Dataset<ImageDataset> {
public:
  explicit ImageDataset(size_t size) : size_(size), blur_(torch::full({3, 1, 3, 3}, 1.0 / 9.0)) {}

  torch::data::Example<> get(size_t index) override {
    auto generator = accelerate::sample_generator(/*seed=*/0, /*epoch=*/0, index);
    auto bytes = torch::randint(0, 256, {3, 96, 96}, generator, torch::kUInt8); // the "encoded" image
    auto image = bytes.to(torch::kFloat32).div_(255.0).sub_(0.5).div_(0.25);
    const auto offsets = torch::randint(0, 96 - 64 + 1, {2}, generator, torch::kInt64);
    image = image.narrow(1, offsets[0].item<int64_t>(), 64).narrow(2, offsets[1].item<int64_t>(), 64);
    if (torch::rand({1}, generator).item<double>() < 0.5) {
      image = image.flip({2});
    }
    image = image.mul(0.8 + 0.4 * torch::rand({1}, generator).item<double>());
    image = torch::conv2d(image.unsqueeze(0), blur_, {}, 1, 1, 1, 3).squeeze(0);
    return {image.contiguous(), torch::tensor(static_cast<int64_t>(index % 10))};
  }
  std::optional<size_t> size() const override { return size_; }

private:
  size_t size_;
  torch::Tensor blur_;
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

/// Batches per second of one epoch of `loader` (a range of stacked examples).
template <typename Loader> double rate(Loader& loader, size_t expected_batches) {
  const auto start = Clock::now();
  size_t batches = 0;
  double checksum = 0;
  for (auto& batch : loader) {
    checksum += batch.data.sum().template item<double>();
    ++batches;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (batches != expected_batches || checksum != checksum) {
    std::cerr << "bench_data_loader: read " << batches << " batches (expected " << expected_batches << ")\n";
    std::exit(1);
  }
  return static_cast<double>(batches) / seconds;
}

std::vector<size_t> parse_list(const std::string& text) {
  std::vector<size_t> values;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    values.push_back(static_cast<size_t>(std::stoul(item)));
  }
  return values;
}

/// The GPU check: pinned, non-blocking batches equal the CPU's, and what pinning gains.
int run_cuda(size_t batches, size_t batch_size, int reps) {
  if (!torch::cuda::is_available()) {
    std::cout << "SKIP data-loader on CUDA: no CUDA device is visible\n";
    return 3;
  }
  accelerate::Accelerator accelerator(accelerate::AcceleratorOptions().non_blocking(true));
  const size_t samples = batches * batch_size;
  auto reference = ImageDataset(samples).map(torch::data::transforms::Stack<>());
  int failures = 0;
  auto loader = accelerator.prepare_data_loader(
      ImageDataset(samples).map(torch::data::transforms::Stack<>()),
      accelerate::DataLoaderOptions(batch_size).shuffle(false).workers(2).pin_memory(true));
  size_t k = 0;
  for (auto& batch : *loader) {
    std::vector<size_t> indices(batch_size);
    for (size_t i = 0; i < batch_size; ++i) {
      indices[i] = k * batch_size + i;
    }
    const auto expected = reference.get_batch(indices);
    if (!batch.data.is_cuda() || !batch.data.cpu().equal(expected.data) ||
        !batch.target.cpu().equal(expected.target)) {
      std::cout << "FAIL batch " << k << " differs from the CPU's (or is not on the GPU)\n";
      ++failures;
    }
    ++k;
  }
  std::cout << (failures == 0 && k == batches ? "PASS" : "FAIL") << " pinned non-blocking batches on "
            << accelerator.device() << " equal the CPU's (" << k << " batches, 2 workers)\n";
  std::map<bool, std::vector<double>> rates;
  auto weights = torch::randn({64, 64}, torch::TensorOptions().device(accelerator.device()));
  for (int rep = 0; rep < reps; ++rep) {
    for (bool pin : {rep % 2 == 0, rep % 2 != 0}) {
      auto timed = accelerator.prepare_data_loader(
          ImageDataset(samples).map(torch::data::transforms::Stack<>()),
          accelerate::DataLoaderOptions(batch_size).workers(2).pin_memory(pin));
      const auto start = Clock::now();
      for (auto& batch : *timed) {
        auto out = batch.data.matmul(weights).relu().sum();
        (void)out;
      }
      torch::cuda::synchronize();
      rates[pin].push_back(static_cast<double>(batches) /
                           std::chrono::duration<double>(Clock::now() - start).count());
    }
  }
  std::cout << std::fixed << std::setprecision(1) << "pin_memory off: " << median(rates[false])
            << " batches/s, on: " << median(rates[true]) << " batches/s (" << std::setprecision(2)
            << median(rates[true]) / median(rates[false]) << "x), " << reps << " repetitions, medians\n";
  return failures == 0 ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  size_t batches = 48;
  size_t batch_size = 32;
  int reps = 5;
  std::vector<size_t> worker_counts{0, 1, 2};
  bool cuda = false;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--cuda") {
      cuda = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) {
      std::cerr << "bench_data_loader: " << flag << " needs a value\n";
      return 2;
    }
    const std::string value = argv[i + 1];
    if (flag == "--batches") {
      batches = std::stoul(value);
    } else if (flag == "--batch-size") {
      batch_size = std::stoul(value);
    } else if (flag == "--reps") {
      reps = std::stoi(value);
    } else if (flag == "--workers") {
      worker_counts = parse_list(value);
    } else {
      std::cerr << "bench_data_loader: unknown flag " << flag
                << " (--batches N, --batch-size B, --reps R, --workers 0,1,2, --cuda)\n";
      return 2;
    }
  }
  at::set_num_threads(1);
  if (cuda) {
    return run_cuda(batches, batch_size, reps);
  }
  accelerate::Accelerator accelerator(accelerate::AcceleratorOptions().cpu(true));
  const size_t samples = batches * batch_size;
  auto dataset = [&] { return ImageDataset(samples).map(torch::data::transforms::Stack<>()); };

  std::map<size_t, std::vector<double>> libtorch_rates, prepared_rates;
  for (int rep = 0; rep < reps; ++rep) {
    for (size_t workers : worker_counts) {
      auto run_libtorch = [&] {
        auto loader = torch::data::make_data_loader(
            dataset(), torch::data::DataLoaderOptions(batch_size).workers(workers));
        libtorch_rates[workers].push_back(rate(*loader, batches));
      };
      auto run_prepared = [&] {
        auto loader = accelerator.prepare_data_loader(
            dataset(), accelerate::DataLoaderOptions(batch_size).workers(workers));
        prepared_rates[workers].push_back(rate(*loader, batches));
      };
      if (rep % 2 == 0) {
        run_libtorch();
        run_prepared();
      } else {
        run_prepared();
        run_libtorch();
      }
    }
  }

  std::cout << "bench_data_loader: " << batches << " batches of " << batch_size
            << " (3x64x64 augmented images), " << reps << " repetitions, medians; 1 intra-op thread, "
            << std::thread::hardware_concurrency() << " hardware threads\n\n";
  std::cout
      << "| workers | (a) libtorch make_data_loader | (b) prepared loader | b/a | b / b at workers(0) |\n";
  std::cout << "|---|---|---|---|---|\n";
  const double own_inline = prepared_rates.count(0) ? median(prepared_rates[0]) : 0.0;
  for (size_t workers : worker_counts) {
    const double a = median(libtorch_rates[workers]);
    const double b = median(prepared_rates[workers]);
    std::cout << std::fixed << std::setprecision(1) << "| " << workers << " | " << a << " batches/s | " << b
              << " batches/s | " << std::setprecision(2) << b / a << "x | ";
    if (own_inline > 0) {
      std::cout << b / own_inline << "x";
    }
    std::cout << " |\n";
  }
  return 0;
}
