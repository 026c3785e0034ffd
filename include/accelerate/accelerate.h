// The one header users include: the whole public API of accelerate-cpp.
#pragma once

#include <accelerate/accelerator.h>
#include <accelerate/fsdp.h>
#include <accelerate/nn.h>
#include <accelerate/options.h>
#include <accelerate/safetensors.h>
