// Input for headers.cpp: a second file of the program that includes the same header.
#include "train_step.h"

torch::optim::SGD& optimizer();
void another_step(torch::Tensor loss) { train_step(loss, optimizer()); }
