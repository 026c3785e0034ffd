// Files a training loop writes are written once, by the main process: image writers, an archive's save_to,
// a model's own save. A file stream the loop opens is emptied by the main process only (the others open it
// for appending), so a process that starts late cannot wipe what the main process wrote; a C file opened with
// "w" likewise. The same holds in the helpers training code calls (two calls deep): their files are written by
// every process too. A function no training code calls is left as it is.
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs | FileCheck %s
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs 2>&1 >/dev/null | FileCheck %s --allow-empty \
// RUN:   --check-prefix=WARN --implicit-check-not=warning:

#include "datasets.h"

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

namespace cv {
class Mat;
bool imwrite(const std::string& filename, const Mat& image);
} // namespace cv
void save_image(const torch::Tensor& image, const std::string& path);
cv::Mat& to_mat(const torch::Tensor& image);

struct Net : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x);
  void save(const std::string& path) const;
};

// CHECK: {{^}}void export_weights(const std::shared_ptr<Net>& model, const std::string& path) {{[{]}}{{$}}
// CHECK-NEXT: {{^}}  auto& accelerator = accelerate::Accelerator::current();{{$}}
void export_weights(const std::shared_ptr<Net>& model, const std::string& path) {
  torch::serialize::OutputArchive archive;
  model->torch::nn::Module::save(archive);
  archive.save_to(path);
  // CHECK: {{^}}  if (accelerator.is_main_process()) archive.save_to(path);{{$}}
}

void write_summary(const std::string& path, double loss) {
  std::ofstream out(path);
  // CHECK: {{^}}  std::ofstream out(path, accelerator.is_main_process() ? std::ios::out : std::ios::app);{{$}}
  out << "loss " << loss << "\n";
  // CHECK: {{^}}  if (accelerator.is_main_process()) out << "loss " << loss << "\n";{{$}}
  std::printf("summary written\n");
  // CHECK: {{^}}  std::printf("summary written\n");{{$}}
}

void write_c_log(const char* path, int epoch) {
  std::FILE* file = std::fopen(path, epoch == 0 ? "w" : "a");
  // CHECK: {{^}}  std::FILE* file = std::fopen(path, accelerator.is_main_process() ? (epoch == 0 ? "w" : "a") : "a");{{$}}
  std::fprintf(file, "%d\n", epoch);
  // CHECK: {{^}}  if (accelerator.is_main_process()) std::fprintf(file, "%d\n", epoch);{{$}}
  std::fclose(file);
}

// Two calls deep.
void report(const std::shared_ptr<Net>& model, double loss, int epoch) {
  export_weights(model, "weights.pt");
  write_summary("summary.txt", loss);
  write_c_log("log.c.txt", epoch);
}

// No training code calls it.
// CHECK: {{^}}void unused_export(const char* path) {{[{]}}{{$}}
// CHECK-NEXT: {{^}}  std::FILE* file = std::fopen(path, "wb");{{$}}
void unused_export(const char* path) {
  std::FILE* file = std::fopen(path, "wb");
  std::fclose(file);
}

int main() {
  auto model = std::make_shared<Net>();
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  std::ofstream log("log.txt");
  // CHECK: {{^}}  std::ofstream log("log.txt", accelerator.is_main_process() ? std::ios::out : std::ios::app);{{$}}
  std::ofstream appended("all.txt", std::ios::app);
  // CHECK: {{^}}  std::ofstream appended("all.txt", std::ios::app);{{$}}
  auto loader = torch::data::make_data_loader(Points().map(torch::data::transforms::Stack<>()), 64);
  for (auto& batch : *loader) {
    optimizer.zero_grad();
    auto output = model->forward(batch.data);
    output.sum().backward();
    optimizer.step();
    log << "done\n";
    // CHECK: {{^}}    if (accelerator.is_main_process()) log << "done\n";{{$}}
    save_image(output, "out.png");
    // CHECK: {{^}}    if (accelerator.is_main_process()) save_image(output, "out.png");{{$}}
    cv::imwrite("out.jpg", to_mat(output));
    // CHECK: {{^}}    if (accelerator.is_main_process()) cv::imwrite("out.jpg", to_mat(output));{{$}}
    model->save("model.bin");
    // CHECK: {{^}}    if (accelerator.is_main_process()) model->save("model.bin");{{$}}
    torch::serialize::OutputArchive archive;
    model->torch::nn::Module::save(archive);
    // CHECK: {{^}}    if (accelerator.is_main_process()) model->torch::nn::Module::save(archive);{{$}}
    archive.save_to("weights.pt");
    // CHECK: {{^}}    if (accelerator.is_main_process()) archive.save_to("weights.pt");{{$}}
    std::FILE* raw = std::fopen("raw.bin", "wb");
    // CHECK: {{^}}    std::FILE* raw = std::fopen("raw.bin", accelerator.is_main_process() ? "wb" : "ab");{{$}}
    std::fclose(raw);
    report(model, 0.5, 1);
  }
}
// WARN-NOT: warning
