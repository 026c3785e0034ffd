// The one header users include: the whole public API of accelerate-cpp.
#pragma once

#include <accelerate/accelerator.h>
#include <accelerate/activation_checkpoint.h>
#include <accelerate/fsdp.h>
#include <accelerate/local_sgd.h>
#include <accelerate/logging.h>
#include <accelerate/memory.h>
#include <accelerate/nn.h>
#include <accelerate/options.h>
#include <accelerate/profiler.h>
#include <accelerate/progress.h>
#include <accelerate/resume.h>
#include <accelerate/safetensors.h>
#include <accelerate/tracker.h>
