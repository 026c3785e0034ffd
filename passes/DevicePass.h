// passes/DevicePass.h: the accelerator chooses the device; manual moves that prepare makes unnecessary go.
#ifndef ACCELERATE_PASSES_DEVICEPASS_H
#define ACCELERATE_PASSES_DEVICEPASS_H

#include "passes/Pass.h"

#include "clang/ASTMatchers/ASTMatchers.h"

namespace accelerate::passes {

/// Device placement:
///
///   torch::Device device(torch::cuda::is_available() ? torch::kCUDA : torch::kCPU);
///     →  torch::Device device = accelerator.device();          (also `= torch::kCUDA`, a DeviceType, `auto`)
///   device = torch::kCUDA;                   →  device = accelerator.device();
///   model->to(device);                       →  (removed: prepare places a model its optimizer trains)
///   batch.data.to(device)                    →  batch.data   (a prepared loader's batch is on the device)
///   std::get<0>(batch).cuda()                →  std::get<0>(batch)
///   x.cuda()                                 →  x.to(accelerator.device())
///   x.to(torch::kCUDA)                       →  x.to(accelerator.device())
///   batch.data.to(device, torch::kFloat)     →  batch.data.to(torch::kFloat)
///
/// Moves to the CPU (`.cpu()`, `.to(torch::kCPU)`), dtype conversions, moves of models that are only
/// evaluated and tensors made with `.device(device)` stay: `device` is now the accelerator's. A device
/// declared explicitly on the CPU (and never set to CUDA) stays as it is.
PassRule devicePass();

/// Matches what devicePass() rewrites into a use of `accelerator`.
clang::ast_matchers::StatementMatcher deviceSiteUsingAccelerator();

} // namespace accelerate::passes

#endif // ACCELERATE_PASSES_DEVICEPASS_H
