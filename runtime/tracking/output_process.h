// Which process prints: the launcher's rank and world size, read once, for the logger and the progress bars
// (runtime-internal). Both print before an Accelerator exists, as Accelerate's do.
#pragma once

#include "transport/environment.h"

namespace accelerate::detail {

/// The launch environment as the launcher reports it, read on first use; one process when its variables
/// cannot be read (the Accelerator reports those).
const LaunchEnvironment& output_process();

} // namespace accelerate::detail
