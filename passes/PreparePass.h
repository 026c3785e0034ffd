// passes/PreparePass.h: optimizers and schedulers go through `accelerator.prepare(...)`, and the models they
// train are prepared where the optimizer is made.
#ifndef ACCELERATE_PASSES_PREPAREPASS_H
#define ACCELERATE_PASSES_PREPAREPASS_H

#include "passes/Pass.h"

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
///
/// An optimizer held by a member of a class (by value, raw pointer, `std::unique_ptr`, `std::shared_ptr`)
/// whose build sites are in the file and whose uses a prepared optimizer supports (step, zero_grad,
/// param_groups,
/// `*member` as a torch::optim::Optimizer&, `delete`) becomes a prepared one where it is built:
///
///   torch::optim::SGD* opt = new torch::optim::SGD(net->parameters(), 0.1);
///     →  accelerate::Optimizer opt = accelerate::Accelerator::current().prepare(
///            torch::optim::SGD(accelerate::Accelerator::current().prepare(net)->parameters(), 0.1));
///   optimizer_ = std::make_unique<torch::optim::Adam>(model_->parameters());   (member of type
///   std::unique_ptr<torch::optim::Adam>, which becomes std::optional<accelerate::Optimizer>)
///     →  accelerator.prepare(model_);
///        optimizer_ = accelerator.prepare(torch::optim::Adam(model_->parameters()));
///
/// Any other member optimizer is reported, naming the member and why.
PassRule preparePass();

/// Matches the declarations preparePass() rewrites (they use `accelerator`).
clang::ast_matchers::StatementMatcher preparedDeclaration();

/// Matches `optimizer = std::make_unique<Opt>(model->parameters(), ...);`, before which preparePass()
/// prepares the models (the optimizer, held as a pointer to torch::optim::Optimizer, stays libtorch's).
clang::ast_matchers::StatementMatcher preparedAssignment();

/// Matches `member = new Opt(...);`, `member = std::make_unique<Opt>(...);` and `member.reset(new Opt(...));`
/// in a function body, for an optimizer member that preparePass() makes a prepared optimizer: it prepares the
/// models before the statement and the optimizer in it (with `accelerator`).
clang::ast_matchers::StatementMatcher preparedMemberBuild();

/// Matches a global optimizer whose (global) models preparePass() prepares at the start of `main`.
clang::ast_matchers::DeclarationMatcher preparedGlobalOptimizer();

/// Matches every statement preparePass() makes use `accelerator` (preparedDeclaration(),
/// preparedAssignment(), preparedMemberBuild()): its registry row's PassInfo::UsesAccelerator.
clang::ast_matchers::StatementMatcher prepareUsesAccelerator();

} // namespace accelerate::passes

#endif // ACCELERATE_PASSES_PREPAREPASS_H
