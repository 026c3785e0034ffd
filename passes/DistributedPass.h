// passes/DistributedPass.h: code that already distributes its work is left alone, and says so.
#ifndef ACCELERATE_PASSES_DISTRIBUTEDPASS_H
#define ACCELERATE_PASSES_DISTRIBUTEDPASS_H

#include "passes/Pass.h"

namespace accelerate::passes {

/// Rewrites nothing. A function that calls the runtime (`accelerate::...`) or c10d itself (a loop that
/// all-reduces its gradients by hand) is already distributed: every pass leaves it alone (see
/// isInDistributedFunction() in TrainingCode.h). When such a function still has code a pass would otherwise
/// rewrite (a tensor `backward()`, a `make_data_loader`), this pass notes once that it was left alone on
/// purpose.
PassRule distributedPass();

} // namespace accelerate::passes

#endif // ACCELERATE_PASSES_DISTRIBUTEDPASS_H
