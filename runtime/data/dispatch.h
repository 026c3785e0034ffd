// The process-group transport of dispatch_batches (include/accelerate/detail/loader_context.h).
#pragma once

#include <accelerate/detail/loader_context.h>

#include <memory>

#include <c10/util/intrusive_ptr.h>

namespace c10d {
class ProcessGroup;
}

namespace accelerate::detail {

/// Sends batches from process 0 to the others over `group`'s CPU backend, point to point (`rank`: this
/// process's).
std::shared_ptr<BatchDispatcher> make_batch_dispatcher(c10::intrusive_ptr<c10d::ProcessGroup> group,
                                                       int rank);

} // namespace accelerate::detail
