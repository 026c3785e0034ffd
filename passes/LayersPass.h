// passes/LayersPass.h: the user's own modules use accelerate::nn::Linear (fused bias, fp8-capable).
#ifndef ACCELERATE_PASSES_LAYERSPASS_H
#define ACCELERATE_PASSES_LAYERSPASS_H

#include "passes/Pass.h"

namespace accelerate::passes {

/// In the modules the user defines (classes derived from `torch::nn::Module` in the rewritten file),
/// `torch::nn::Linear` becomes `accelerate::nn::Linear`, a drop-in with the same options and parameter names
/// that fuses the bias into the GEMM and runs fp8 under that precision (shared/DESIGN.md §3.9):
///
///   torch::nn::Linear fc1{nullptr};        →  accelerate::nn::Linear fc1{nullptr};
///   register_module("fc1", torch::nn::Linear(784, 512))
///                                          →  register_module("fc1", accelerate::nn::Linear(784, 512))
///
/// Modules the user does not define (a TorchScript model, libtorch's own) are left alone. The pass is off
/// unless named in `--passes=`: the member's type changes, so code elsewhere that takes it as a
/// `torch::nn::Linear` would have to change too (the rewrite is compiled before it is written, so such a file
/// is left as it is, with the compiler's message).
PassRule layersPass();

} // namespace accelerate::passes

#endif // ACCELERATE_PASSES_LAYERSPASS_H
