// Input for accelerator.cpp: a header that declares the program's accelerator.
#pragma once
#include <accelerate/accelerate.h>

extern accelerate::Accelerator accelerator;
