// passes/FsdpUnitsPass.h: the forward of every module class of the project runs through the fsdp unit call.
#ifndef ACCELERATE_PASSES_FSDPUNITSPASS_H
#define ACCELERATE_PASSES_FSDPUNITSPASS_H

#include "passes/Pass.h"

namespace accelerate::passes {

/// In every class of the project derived from `torch::nn::Module` (the main file and the headers the rewrite
/// may change), the body of each `forward` runs inside `accelerate::fsdp::unit`, the runtime's unit call:
///
///   torch::Tensor forward(torch::Tensor x) {     torch::Tensor forward(torch::Tensor x) {
///     x = fc1(x);                            →     return accelerate::fsdp::unit(*this, [&]() ->
///     torch::Tensor { return fc2(torch::relu(x));                    x = fc1(x);
///   }                                                return fc2(torch::relu(x));
///                                                  });
///                                                }
///
/// Under the fsdp strategy the wrap policy (fsdp_auto_wrap_policy) decides at prepare which instances are
/// units; for every other instance, and under any other strategy, the call is a plain call of the body. Left
/// alone, with a warning: a forward whose result a unit cannot hook (not a Tensor, a vector of them, or a
/// tuple or pair of those), one whose return type depends on a template parameter, one written by a macro.
/// Noted: a member of a project module that is one of libtorch's composite modules (its forward cannot be
/// edited; the runtime makes the enclosing project module the unit when the policy names it). Off unless
/// named in `--passes=` (`accelerate_target(... FSDP)` names it).
PassRule fsdpUnitsPass();

} // namespace accelerate::passes

#endif // ACCELERATE_PASSES_FSDPUNITSPASS_H
