// passes/PreparePass.h: optimizers and schedulers go through `accelerator.prepare(...)`, and the models they
// train are prepared where the optimizer is made.
#ifndef ACCELERATE_PASSES_PREPAREPASS_H
#define ACCELERATE_PASSES_PREPAREPASS_H

#include "passes/Registry.h"

#include "clang/ASTMatchers/ASTMatchers.h"

namespace accelerate::passes {

/// Rewrites the declaration of each local optimizer and learning-rate scheduler into a prepared one, and
/// prepares (in place) the models whose `parameters()` the optimizer takes, right before it:
///
///   torch::optim::SGD optimizer(model->parameters(), 0.1);
///     →  accelerator.prepare(model);
///        auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
///   auto optimizer = std::make_shared<torch::optim::Adam>(net->parameters());
///     →  accelerator.prepare(net);
///        auto optimizer = accelerator.prepare(torch::optim::Adam(net->parameters()));
///   torch::optim::StepLR scheduler(optimizer, 10, 0.5);
///     →  auto scheduler = accelerator.prepare(torch::optim::StepLR(optimizer, 10, 0.5));
///
/// The prepared optimizer keeps `step()`, `zero_grad()`, `->` and converts to `torch::optim::Optimizer&`, so
/// the call sites stay as written. A model that two optimizers train is prepared once, before the first. A
/// global optimizer stays libtorch's; its global models are prepared at the start of `main`. An optimizer
/// over tensors that come from no model's `parameters()` is reported and left alone.
PassRule preparePass();

/// Matches the declarations preparePass() rewrites (they use `accelerator`).
clang::ast_matchers::StatementMatcher preparedDeclaration();

/// Matches `optimizer = std::make_unique<Opt>(model->parameters(), ...);`, before which preparePass()
/// prepares the models (the optimizer, held as a pointer to torch::optim::Optimizer, stays libtorch's).
clang::ast_matchers::StatementMatcher preparedAssignment();

/// Matches a global optimizer whose (global) models preparePass() prepares at the start of `main`.
clang::ast_matchers::DeclarationMatcher preparedGlobalOptimizer();

} // namespace accelerate::passes

#endif // ACCELERATE_PASSES_PREPAREPASS_H
