// The rewrite parses the file's #include block once, as a precompiled preamble that the compile check of the
// rewrite reuses; --preamble-cache keeps it between runs. The output is the same with a cached preamble, with
// one built for the run, and without one (--no-preamble). A cached preamble is reused while the flags, the
// #include lines and every header it read are unchanged, and built again when a header changes.
// RUN: rm -rf %t && mkdir -p %t && cp %s %t/train.cpp && cp %S/Inputs/preamble_model.h %t/model.h
// RUN: %accel-rewrite --preamble-cache=%t/cache %t/train.cpp -o %t/cold.cpp -- -std=c++17 -I%S/Inputs
// RUN: ls %t/cache | FileCheck --check-prefix=CACHE %s
// CACHE: {{^[0-9a-f]{32}\.files$}}
// CACHE-NEXT: {{^[0-9a-f]{32}\.pch$}}
// CACHE-NOT: {{.}}
// RUN: ls -i %t/cache > %t/entries.cold
// RUN: %accel-rewrite --preamble-cache=%t/cache %t/train.cpp -o %t/warm.cpp -- -std=c++17 -I%S/Inputs
// RUN: ls -i %t/cache | diff - %t/entries.cold
// RUN: %accel-rewrite %t/train.cpp -o %t/run.cpp -- -std=c++17 -I%S/Inputs
// RUN: %accel-rewrite --no-preamble %t/train.cpp -o %t/whole.cpp -- -std=c++17 -I%S/Inputs
// RUN: diff %t/whole.cpp %t/cold.cpp && diff %t/whole.cpp %t/warm.cpp && diff %t/whole.cpp %t/run.cpp
// RUN: FileCheck --input-file=%t/warm.cpp %s
// The preamble ends with the runtime's header, which the rewrite adds after the last #include: the check of
// the rewrite does not parse it again. Its record lists the files it read.
// RUN: grep -c 'Inputs/accelerate/accelerate.h$' %t/cache/*.files | FileCheck --check-prefix=TRAILER %s
// TRAILER: 1
// CHECK: #include <accelerate/accelerate.h>
// CHECK: accelerator.backward(loss);
//
// A header of the preamble changes: the cached preamble no longer fits and is not used (the file no longer
// compiles with the new header, and the rewrite says so), then a new one replaces it.
// RUN: sed -i 's/forward(/predict(/' %t/model.h
// RUN: not %accel-rewrite --preamble-cache=%t/cache %t/train.cpp -o %t/stale.cpp -- -std=c++17 -I%S/Inputs 2>&1 \
// RUN:   | FileCheck --check-prefix=STALE %s
// STALE: train.cpp:{{[0-9]+}}:{{[0-9]+}}: error: no member named 'forward' in 'Net'
// RUN: sed -i 's/predict(/forward(/; s/return x;/return x.sum();/' %t/model.h
// RUN: %accel-rewrite --preamble-cache=%t/cache %t/train.cpp -o %t/fresh.cpp -- -std=c++17 -I%S/Inputs
// RUN: ls -i %t/cache | not diff - %t/entries.cold > /dev/null
// RUN: ls %t/cache | count 2
// RUN: diff %t/whole.cpp %t/fresh.cpp
//
// An error in a header of the preamble is reported where it is (the preamble is not used).
// RUN: cp %t/model.h %t/model.good && sed -i 's/return x.sum();/return x.no_such_method();/' %t/model.h
// RUN: not %accel-rewrite --preamble-cache=%t/cache %t/train.cpp -o %t/broken.cpp -- -std=c++17 -I%S/Inputs 2>&1 \
// RUN:   | FileCheck --check-prefix=HEADER %s
// HEADER: model.h:{{[0-9]+}}:{{[0-9]+}}: error: no member named 'no_such_method'
// HEADER: train.cpp does not compile
// RUN: cp %t/model.good %t/model.h
//
// A file under an include guard (a header rewritten as a file of its own) has a preamble inside the guard.
// RUN: mkdir -p %t/guarded && cp %t/model.h %t/guarded/model.h
// RUN: printf '#ifndef GUARDED_H\n#define GUARDED_H\n' > %t/guarded/train.cpp
// RUN: sed -n '/^#include "model.h"/,$p' %s >> %t/guarded/train.cpp && echo '#endif' >> %t/guarded/train.cpp
// RUN: %accel-rewrite --preamble-cache=%t/guarded/cache %t/guarded/train.cpp -o %t/guarded/cold.cpp -- -std=c++17 -I%S/Inputs
// RUN: ls %t/guarded/cache | count 2
// RUN: %accel-rewrite --no-preamble %t/guarded/train.cpp -o %t/guarded/whole.cpp -- -std=c++17 -I%S/Inputs
// RUN: diff %t/guarded/whole.cpp %t/guarded/cold.cpp
//
// Where the runtime's header does not compile with the file's flags, the preamble is built without it, kept,
// and reused.
// RUN: mkdir -p %t/plain/broken/accelerate %t/plain/cache && cp %t/model.h %t/plain/model.h
// RUN: echo '#error the runtime header does not compile here' > %t/plain/broken/accelerate/accelerate.h
// RUN: printf '#include "model.h"\n\nint main() { return 0; }\n' > %t/plain/helper.cpp
// RUN: %accel-rewrite --preamble-cache=%t/plain/cache %t/plain/helper.cpp -o %t/plain/cold.cpp -- -std=c++17 \
// RUN:   -I%t/plain/broken -I%S/Inputs
// RUN: ls %t/plain/cache | count 2
// RUN: not grep accelerate.h %t/plain/cache/*.files
// RUN: ls -i %t/plain/cache > %t/plain/entries
// RUN: %accel-rewrite --preamble-cache=%t/plain/cache %t/plain/helper.cpp -o %t/plain/warm.cpp -- -std=c++17 \
// RUN:   -I%t/plain/broken -I%S/Inputs
// RUN: ls -i %t/plain/cache | diff - %t/plain/entries
// RUN: diff %t/plain/helper.cpp %t/plain/cold.cpp && diff %t/plain/helper.cpp %t/plain/warm.cpp
//
// Over a PCH the command gives (-include-pch), the preamble extends it; it is built again when the PCH is.
// RUN: mkdir -p %t/pch && cp %t/model.h %t/pch/model.h && cp %t/train.cpp %t/pch/train.cpp
// RUN: %clang -x c++-header -std=c++17 -I%S/Inputs %t/pch/model.h -o %t/pch/model.pch
// RUN: %accel-rewrite --preamble-cache=%t/pch/cache %t/pch/train.cpp -o %t/pch/cold.cpp -- -std=c++17 \
// RUN:   -I%S/Inputs -include-pch %t/pch/model.pch
// RUN: grep -c 'pch/model.pch$' %t/pch/cache/*.files | FileCheck --check-prefix=TRAILER %s
// RUN: ls -i %t/pch/cache > %t/pch/entries
// RUN: %accel-rewrite --preamble-cache=%t/pch/cache %t/pch/train.cpp -o %t/pch/warm.cpp -- -std=c++17 \
// RUN:   -I%S/Inputs -include-pch %t/pch/model.pch
// RUN: ls -i %t/pch/cache | diff - %t/pch/entries
// RUN: touch -d '+1 minute' %t/pch/model.h
// RUN: %clang -x c++-header -std=c++17 -I%S/Inputs %t/pch/model.h -o %t/pch/model.pch
// RUN: %accel-rewrite --preamble-cache=%t/pch/cache %t/pch/train.cpp -o %t/pch/rebuilt.cpp -- -std=c++17 \
// RUN:   -I%S/Inputs -include-pch %t/pch/model.pch
// RUN: ls -i %t/pch/cache | not diff - %t/pch/entries > /dev/null
// RUN: diff %t/whole.cpp %t/pch/cold.cpp && diff %t/whole.cpp %t/pch/warm.cpp && diff %t/whole.cpp %t/pch/rebuilt.cpp
//
// A cache that cannot be made is said, and the rewrite goes on without it.
// RUN: touch %t/file
// RUN: %accel-rewrite --preamble-cache=%t/file/cache %t/train.cpp -o %t/nocache.cpp -- -std=c++17 -I%S/Inputs \
// RUN:   2>&1 | FileCheck --check-prefix=NOCACHE %s
// NOCACHE: accel-rewrite: warning: cannot create the preamble cache {{.*}}/file/cache: {{.+}}
// RUN: diff %t/whole.cpp %t/nocache.cpp
// RUN: not %accel-rewrite --no-preamble --preamble-cache=%t/cache %t/train.cpp -- -std=c++17 2>&1 \
// RUN:   | FileCheck --check-prefix=BOTH %s
// BOTH: accel-rewrite: --no-preamble parses without a preamble, so there is none to keep in --preamble-cache

#include "model.h"

#include <iostream>
#include <memory>

int main() {
  torch::Device device(torch::kCUDA);
  auto model = std::make_shared<Net>();
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  for (int step = 0; step < 10; ++step) {
    optimizer.zero_grad();
    auto loss = model->forward(torch::randn({8, 4}, device)).sum();
    loss.backward();
    optimizer.step();
  }
}
