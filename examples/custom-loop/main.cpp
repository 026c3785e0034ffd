// custom-loop [batch_size=32] [steps=200]: the program's entry point only reads its arguments and hands over
// to the Trainer (trainer.cpp), where the training loop is.
#include "trainer.h"

#include <cstdlib>
#include <iostream>

int main(int argc, char** argv) {
  const int64_t batch_size = argc > 1 ? std::atoll(argv[1]) : 32;
  const int64_t steps = argc > 2 ? std::atoll(argv[2]) : 200;
  torch::manual_seed(0);
  Trainer trainer(batch_size, steps, 0.1);
  const double loss = trainer.fit();
  std::cout << "final loss " << loss << std::endl;
  return 0;
}
