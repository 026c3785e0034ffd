// `clang-tidy --fix --format-style=none` with accelerate-distribute-loop writes, byte for byte, what
// accel-rewrite writes, on three real training loops compiled against the real libtorch headers: two
// optimizers (a GAN), a learning-rate scheduler, and a loop that checkpoints every n steps. accel-rewrite is
// the reference: the rewrite accelerate_target() made of the same fixture at build time (test/fixtures), less
// the #line directives it asks for, so each loop is parsed with libtorch's headers once here, not three times.
// REQUIRES: torch
// RUN: rm -rf %t && mkdir -p %t
// RUN: cp %source_root/test/fixtures/gan_two_optimizers.cpp %t/gan.cpp
// RUN: sed '/^#line /d' %fixtures_rewritten/fixture_gan_two_optimizers.accelerate/gan_two_optimizers.cpp > %t/gan.ref.cpp
// RUN: %tidy --fix --format-style=none %t/gan.cpp -- -std=c++17 -I%source_root/test/fixtures %torch_includes 2>&1 | FileCheck %s --check-prefix=GAN
// RUN: cmp %t/gan.ref.cpp %t/gan.cpp
// RUN: cp %source_root/test/fixtures/scheduler.cpp %t/scheduler.cpp
// RUN: sed '/^#line /d' %fixtures_rewritten/fixture_scheduler.accelerate/scheduler.cpp > %t/scheduler.ref.cpp
// RUN: %tidy --fix --format-style=none %t/scheduler.cpp -- -std=c++17 -I%source_root/test/fixtures %torch_includes 2>&1 | FileCheck %s --check-prefix=SCHEDULER
// RUN: cmp %t/scheduler.ref.cpp %t/scheduler.cpp
// RUN: cp %source_root/test/fixtures/checkpoint_every_n.cpp %t/checkpoint.cpp
// RUN: sed '/^#line /d' %fixtures_rewritten/fixture_checkpoint_every_n.accelerate/checkpoint_every_n.cpp > %t/checkpoint.ref.cpp
// RUN: %tidy --fix --format-style=none %t/checkpoint.cpp -- -std=c++17 -I%source_root/test/fixtures %torch_includes 2>&1 | FileCheck %s --check-prefix=CHECKPOINT
// RUN: cmp %t/checkpoint.ref.cpp %t/checkpoint.cpp
// The fixed file is distributed: a second --fix (with the runtime's headers, which it now includes) changes
// nothing.
// RUN: %tidy --fix --format-style=none %t/checkpoint.cpp -- -std=c++17 -I%source_root/test/fixtures -I%source_root/include %torch_includes 2>&1 | FileCheck %s --check-prefix=AGAIN --allow-empty
// RUN: cmp %t/checkpoint.ref.cpp %t/checkpoint.cpp

// GAN: gan.cpp:25:3: warning: this training loop runs on one device; distribute it with accelerate (13 changes
// GAN: clang-tidy applied {{[0-9]+}} of {{[0-9]+}} suggested fixes.
// SCHEDULER: scheduler.cpp:16:3: warning: this training loop runs on one device
// SCHEDULER: clang-tidy applied
// CHECKPOINT: checkpoint.cpp:17:3: warning: this training loop runs on one device
// CHECKPOINT: clang-tidy applied
// AGAIN-NOT: warning:
