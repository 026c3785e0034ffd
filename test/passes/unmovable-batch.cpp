// A loader whose batches hold a type the runtime cannot move to a device (a user struct as the target) is
// reported with the loader, the batch type and the one function to write (accelerate::ToDevice); the rest of
// the file is still rewritten, and its batches keep their moves.
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs | FileCheck %s
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs 2>&1 >/dev/null | FileCheck %s --check-prefix=WARN \
// RUN:   --implicit-check-not=warning:

#include <torch/torch.h>

#include <memory>

struct Boxes {
  torch::Tensor corners;
  int count;
};

struct Detections : torch::data::datasets::Dataset<Detections, torch::data::Example<torch::Tensor, Boxes>> {
  torch::data::Example<torch::Tensor, Boxes> get(size_t index) override;
  std::optional<size_t> size() const override;
};

struct Net : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x);
};

int main() {
  torch::Device device(torch::kCUDA);
  auto model = std::make_shared<Net>();
  model->to(device);
  // CHECK-NOT: {{^}}  model->to(device);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  // CHECK: {{^}}  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));{{$}}
  auto loader = torch::data::make_data_loader(Detections(), 8);
  // CHECK: {{^}}  auto loader = torch::data::make_data_loader(Detections(), 8);{{$}}
  // WARN: unmovable-batch.cpp:[[@LINE-2]]:{{[0-9]+}}: warning: data loader 'loader' not rewritten: its batches are `{{.*}}Example<{{.*}}Boxes>{{.*}}`, and the runtime does not know how to move `Boxes` to a device; {{.*}}`template <> struct accelerate::ToDevice<Boxes> { static Boxes apply(Boxes value, const torch::Device& device); };`{{.*}} [data-loader]
  for (auto& batch : *loader) {
    optimizer.zero_grad();
    auto loss = model->forward(batch[0].data.to(device)).sum();
    // CHECK: {{^}}    auto loss = model->forward(batch[0].data.to(device)).sum();{{$}}
    loss.backward();
    // CHECK: {{^}}    accelerator.backward(loss);{{$}}
    optimizer.step();
  }
}
