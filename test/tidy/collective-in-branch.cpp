// accelerate-collective-in-branch: a collective of the accelerator that only some processes reach hangs the
// job; no fix, the message says to move it out of the branch. Collectives every process reaches, and
// branches on conditions every process agrees on, are left alone.
// RUN: %tidy -checks=-*,accelerate-collective-in-branch %s -- -std=c++17 -I%passes_inputs 2>&1 \
// RUN:   | FileCheck %s --implicit-check-not=warning:

#include <accelerate/accelerate.h>
#include <torch/torch.h>

void save_everything(accelerate::Accelerator& accelerator) { accelerator.save_state("checkpoints"); }
// CHECK: collective-in-branch.cpp:[[@LINE-1]]:62: warning: accelerator.save_state() is a collective that every process must call, but this call is after a statement that some processes leave at, or in a function only some processes call: with more than one process, the processes that reach it wait for the others, which never call it, and the job hangs; move the call out of the branch, so that every process makes it, and keep in the branch only what one process does [accelerate-collective-in-branch]

int main() {
  accelerate::Accelerator accelerator;
  torch::nn::Linear model(4, 1);
  accelerator.prepare(model);
  auto optimizer = accelerator.prepare(torch::optim::SGD(model->parameters(), 0.1));
  const bool is_main = accelerator.is_main_process();
  for (int step = 0; step < 10; ++step) {
    auto loss = model->forward(torch::randn({8, 4})).sum();
    accelerator.backward(loss);
    optimizer.step();
    if (accelerator.is_main_process()) {
      accelerator.save_state();
      // CHECK: collective-in-branch.cpp:[[@LINE-1]]:7: warning: accelerator.save_state() is a collective that every process must call, but this call is in the branch of 'if (accelerator.is_main_process())' (line [[@LINE-2]]), whose condition depends on the process: {{.*}}; move the call out of the branch
      std::cout << "saved\n";
    } else {
      accelerator.wait_for_everyone();
      // CHECK: collective-in-branch.cpp:[[@LINE-1]]:7: warning: accelerator.wait_for_everyone() {{.*}} in the else branch of 'if (accelerator.is_main_process())'
    }
    if (is_main && step % 5 == 0) {
      auto all = accelerator.gather(loss);
      // CHECK: collective-in-branch.cpp:[[@LINE-1]]:18: warning: accelerator.gather() {{.*}} in the branch of 'if (is_main && step % 5 == 0)'
    }
    if (accelerator.process_index() == 0)
      accelerator.reduce(loss);
    // CHECK: collective-in-branch.cpp:[[@LINE-1]]:7: warning: accelerator.reduce() {{.*}} 'if (accelerator.process_index() == 0)'
    if (step % 5 == 0) {
      accelerator.save_state(); // every process agrees on the step
      accelerator.wait_for_everyone();
    }
    if (accelerator.num_processes() > 1)
      accelerator.wait_for_everyone(); // the same on every process
  }
  if (!accelerator.is_local_main_process())
    return 0;
  accelerator.save_model(*model, "model");
  // CHECK: collective-in-branch.cpp:[[@LINE-1]]:3: warning: accelerator.save_model() {{.*}} after a statement that some processes leave at
  if (accelerator.is_main_process())
    save_everything(accelerator);
  if (accelerator.is_main_process())
    accelerator.print("done"); // not a collective
}
