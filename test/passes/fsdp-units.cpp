// The fsdp-units pass (off by default; --enable=fsdp-units, or accelerate_target(... FSDP)): the forward of every
// module class of the project runs inside accelerate::fsdp::unit, whose wrap policy decides at prepare which
// instances are units. Forwards whose result a unit cannot hook are reported and left alone; libtorch's
// composite modules, whose forward nobody can edit, are noted.
// RUN: rm -rf %t && mkdir -p %t/proj
// RUN: %accel-rewrite %s -- -std=c++17 -I%S/Inputs > %t/default.cpp 2> %t/default.stderr
// RUN: diff %s %t/default.cpp
// RUN: count 0 < %t/default.stderr
// RUN: %accel-rewrite %s --enable=fsdp-units --explain -- -std=c++17 -I%S/Inputs > %t/once.cpp 2> %t/once.stderr
// RUN: FileCheck --strict-whitespace %s < %t/once.cpp
// RUN: FileCheck --check-prefix=SAID %s < %t/once.stderr
// RUN: %accel-rewrite %s --passes=fsdp-units -- -std=c++17 -I%S/Inputs | diff %t/once.cpp -
// A second run changes nothing: the wrapped forwards are left alone.
// RUN: %accel-rewrite %t/once.cpp --enable=fsdp-units --explain -- -std=c++17 -I%S/Inputs > %t/twice.cpp \
// RUN:   2> %t/twice.stderr
// RUN: diff %t/once.cpp %t/twice.cpp
// RUN: FileCheck --check-prefix=AGAIN %s < %t/twice.stderr

// A module class in a header of the project is rewritten with it (--headers):
// RUN: cp %S/Inputs/fsdp_block.h %t/proj/ && cp %s %t/proj/train.cpp
// RUN: %accel-rewrite %t/proj/train.cpp --enable=fsdp-units --headers=%t/proj --output-dir=%t/out --root=%t/proj \
// RUN:   -- -std=c++17 -I%t/proj -I%S/Inputs -DWITH_HEADER 2>/dev/null
// RUN: FileCheck --strict-whitespace --check-prefix=HEADER %s < %t/out/fsdp_block.h
// HEADER:      #include <accelerate/accelerate.h>
// HEADER:      {{^}}  torch::Tensor forward(torch::Tensor x) {{[{]$}}
// HEADER-NEXT: {{^}}    return accelerate::fsdp::unit(*this, x, [&](torch::Tensor x) -> torch::Tensor {{[{]$}}
// HEADER-NEXT: {{^}}      return torch::relu(fc->forward(x));{{$}}
// HEADER-NEXT: {{^}}    });{{$}}
// HEADER-NEXT: {{^}}  }{{$}}

// A file without a module class, with the pass asked for: one warning, and the file's other rewrites.
// RUN: %accel-rewrite %S/Inputs/no_modules.cpp --enable=fsdp-units -- -std=c++17 -I%S/Inputs 2>&1 >/dev/null \
// RUN:   | FileCheck --check-prefix=NONE %s
// NONE: accel-rewrite: warning: no class derived from torch::nn::Module with a forward is defined in the files rewritten (the inputs, and the headers --headers names), so no module can become an FSDP unit; rewrite the file that defines the model's classes, or name its header with --headers [fsdp-units]
// --enable checks its names like --passes:
// RUN: not %accel-rewrite %s --enable=fsdp-unit -- -std=c++17 -I%S/Inputs 2>&1 | FileCheck --check-prefix=UNKNOWN %s
// UNKNOWN: unknown pass 'fsdp-unit' (known: {{.*}}fsdp-units
// RUN: not %accel-rewrite %s --enable=fsdp-units --disable=fsdp-units -- -std=c++17 -I%S/Inputs 2>&1 \
// RUN:   | FileCheck --check-prefix=BOTH %s
// BOTH: --enable and --disable both name the pass 'fsdp-units'; drop one of them

#include <torch/torch.h>

#ifdef WITH_HEADER
#include "fsdp_block.h"
#endif

#include <tuple>
#include <vector>

#define FORWARD_OF(member) \
  torch::Tensor forward(torch::Tensor x) { return member(x); }

// A module class: its forward runs through the unit call, one step deeper.
struct BlockImpl : torch::nn::Module {
  BlockImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(4, 4));
    fc2 = register_module("fc2", torch::nn::Linear(4, 4));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = fc1->forward(x); // the first layer

    return fc2->forward(torch::relu(x));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
// CHECK:      {{^}}  torch::Tensor forward(torch::Tensor x) {{[{]$}}
// CHECK-NEXT: {{^}}    return accelerate::fsdp::unit(*this, x, [&](torch::Tensor x) -> torch::Tensor {{[{]$}}
// CHECK-NEXT: {{^}}      x = fc1->forward(x); // the first layer{{$}}
// CHECK-EMPTY:
// CHECK-NEXT: {{^}}      return fc2->forward(torch::relu(x));{{$}}
// CHECK-NEXT: {{^}}    });{{$}}
// CHECK-NEXT: {{^}}  }{{$}}

// On one line, it stays on one line; several overloads are each wrapped.
struct Head : torch::nn::Module {
  torch::nn::Linear fc{nullptr};
  torch::Tensor forward(torch::Tensor x) { return fc->forward(x); }
  torch::Tensor forward(torch::Tensor x, torch::Tensor mask) { return fc->forward(x * mask); }
};
// CHECK: {{^}}  torch::Tensor forward(torch::Tensor x) { return accelerate::fsdp::unit(*this, x, [&](torch::Tensor x) -> torch::Tensor { return fc->forward(x); }); }{{$}}
// CHECK-NEXT: {{^}}  torch::Tensor forward(torch::Tensor x, torch::Tensor mask) { return accelerate::fsdp::unit(*this, x, mask, [&](torch::Tensor x, torch::Tensor mask) -> torch::Tensor { return fc->forward(x * mask); }); }{{$}}

// Several results: the lambda keeps the declared type, so `return {a, b};` still means a tuple.
struct TwoHeads : torch::nn::Module {
  torch::nn::Linear a{nullptr}, b{nullptr};
  std::tuple<torch::Tensor, torch::Tensor> forward(const torch::Tensor& x) {
    return {a->forward(x), b->forward(x)};
  }
};
// CHECK:      {{^}}    return accelerate::fsdp::unit(*this, x, [&](const torch::Tensor& x) -> std::tuple<torch::Tensor, torch::Tensor> {{[{]$}}
// CHECK-NEXT: {{^}}      return {a->forward(x), b->forward(x)};{{$}}
// CHECK-NEXT: {{^}}    });{{$}}

// A template module: wrapped once, as written.
template <int Width> struct Scaled : torch::nn::Module {
  torch::nn::Linear fc{nullptr};
	torch::Tensor forward(torch::Tensor x) {
		return fc->forward(x) * torch::zeros({Width});
	}
};
Scaled<3> scaled;
// A body indented with tabs gets one more tab:
// CHECK:      {{^}}	torch::Tensor forward(torch::Tensor x) {{[{]$}}
// CHECK-NEXT: {{^}}		return accelerate::fsdp::unit(*this, x, [&](torch::Tensor x) -> torch::Tensor {{[{]$}}
// CHECK-NEXT: {{^}}			return fc->forward(x) * torch::zeros({Width});{{$}}
// CHECK-NEXT: {{^}}		});{{$}}
// CHECK-NEXT: {{^}}	}{{$}}

// Defined outside its class.
struct Stack : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x);
  std::vector<torch::Tensor> all(torch::Tensor x);
  torch::nn::Linear fc{nullptr};
};
torch::Tensor Stack::forward(torch::Tensor x) {
  return fc->forward(x);
}
// CHECK:      {{^}}torch::Tensor Stack::forward(torch::Tensor x) {{[{]$}}
// CHECK-NEXT: {{^}}  return accelerate::fsdp::unit(*this, x, [&](torch::Tensor x) -> torch::Tensor {{[{]$}}
// CHECK-NEXT: {{^}}    return fc->forward(x);{{$}}
// CHECK-NEXT: {{^}}  });{{$}}
// CHECK-NEXT: {{^}}}{{$}}

// The forward's inputs go through the unit call (the body must still be callable in backward, when the runtime
// recomputes it): an unnamed one is left out, a default argument is not repeated. An rvalue reference keeps the
// form that captures the inputs, which the runtime never recomputes.
struct Masked : torch::nn::Module {
  torch::nn::Linear fc{nullptr};
  torch::Tensor forward(torch::Tensor x, torch::Tensor /*unused*/, double scale = 1.0) { return fc->forward(x); }
  torch::Tensor forward(torch::Tensor&& x) { return fc->forward(x); }
};
// CHECK: {{^}}  torch::Tensor forward(torch::Tensor x, torch::Tensor /*unused*/, double scale = 1.0) { return accelerate::fsdp::unit(*this, x, scale, [&](torch::Tensor x, double scale) -> torch::Tensor { return fc->forward(x); }); }{{$}}
// CHECK-NEXT: {{^}}  torch::Tensor forward(torch::Tensor&& x) { return accelerate::fsdp::unit(*this, [&]() -> torch::Tensor { return fc->forward(x); }); }{{$}}

// A deduced result keeps its deduction (`auto`: the lambda deduces the same way; `decltype(auto)` is kept);
// a pair and a vector of tensors are results a unit can hook.
struct Deduced : torch::nn::Module {
  torch::nn::Linear fc{nullptr};
  auto forward(torch::Tensor x) { return fc->forward(x); }
  decltype(auto) forward(torch::Tensor x, int) { return fc->forward(x); }
  std::pair<torch::Tensor, torch::Tensor> forward(const std::vector<torch::Tensor>& xs) { return {xs[0], xs[1]}; }
  std::vector<torch::Tensor> forward(torch::Tensor x, double) { return {x, x}; }
};
// CHECK: {{^}}  auto forward(torch::Tensor x) { return accelerate::fsdp::unit(*this, x, [&](torch::Tensor x) { return fc->forward(x); }); }{{$}}
// CHECK-NEXT: {{^}}  decltype(auto) forward(torch::Tensor x, int) { return accelerate::fsdp::unit(*this, x, [&](torch::Tensor x) -> decltype(auto) { return fc->forward(x); }); }{{$}}
// CHECK-NEXT: {{^}}  std::pair<torch::Tensor, torch::Tensor> forward(const std::vector<torch::Tensor>& xs) { return accelerate::fsdp::unit(*this, xs, [&](const std::vector<torch::Tensor>& xs) -> std::pair<torch::Tensor, torch::Tensor> { return {xs[0], xs[1]}; }); }{{$}}
// CHECK-NEXT: {{^}}  std::vector<torch::Tensor> forward(torch::Tensor x, double) { return accelerate::fsdp::unit(*this, x, [&](torch::Tensor x) -> std::vector<torch::Tensor> { return {x, x}; }); }{{$}}

// Reported, and left as they are: results a unit cannot hook, a dependent result, a macro.
struct Scorer : torch::nn::Module {
  torch::nn::Linear fc{nullptr};
  double forward(torch::Tensor x) { return fc->forward(x).item<double>(); }
};
template <typename Out> struct Generic : torch::nn::Module {
  Out forward(torch::Tensor x) { return Out(x); }
};
struct FromMacro : torch::nn::Module {
  torch::nn::Linear fc{nullptr};
  FORWARD_OF(fc->forward)
};
// CHECK: {{^}}  double forward(torch::Tensor x) { return fc->forward(x).item<double>(); }{{$}}
// CHECK: {{^}}  Out forward(torch::Tensor x) { return Out(x); }{{$}}
// CHECK: {{^}}  FORWARD_OF(fc->forward){{$}}

// A libtorch layer held by a project module: noted, since nobody can edit its forward.
struct Encoder : torch::nn::Module {
  torch::nn::TransformerEncoderLayer layer{nullptr};
  torch::Tensor forward(torch::Tensor x) { return layer->forward(x); }
};

// Not a module: untouched.
struct Helper {
  torch::Tensor forward(torch::Tensor x) { return x; }
};
// CHECK: {{^}}  torch::Tensor forward(torch::Tensor x) { return x; }{{$}}

void train(torch::optim::SGD& optimizer);

// SAID: fsdp-units.cpp:{{[0-9]+}}:43: note: [fsdp-units] inserted 'return accelerate::fsdp::unit(*this, x, [&](torch::Tensor x) -> torch::Tensor {'; inserted '});'; added #include <accelerate/accelerate.h>: 'BlockImpl::forward' runs inside accelerate::fsdp::unit: under parallel_strategy 'fsdp' an instance the wrap policy (fsdp_auto_wrap_policy) makes a unit has its parameters gathered for its forward and its backward and sharded otherwise; any other call is a plain call
// SAID: warning: 'Scorer::forward' not made an FSDP unit: it returns 'double', and a unit's backward is attached to the tensors its forward returns; it stays a plain forward, and its parameters train in the unit of the module that holds it. Fix: return torch::Tensor, std::vector<torch::Tensor>, or a std::tuple or std::pair of them [fsdp-units]
// SAID: warning: 'Generic::forward' not made an FSDP unit: its return type 'Out' depends on a template parameter
// SAID: warning: 'FromMacro::forward' not made an FSDP unit: its body comes from a macro
// SAID: note: [fsdp-units] 'Encoder::layer' is libtorch's TransformerEncoderLayerImpl, whose forward cannot call accelerate::fsdp::unit
// SAID: accel-rewrite: {{.*}}fsdp-units.cpp: 13 changes, 3 not rewritten, 1 left alone
// AGAIN: note: [fsdp-units] 'BlockImpl::forward' left alone: its forward already calls accelerate::fsdp::unit
// AGAIN-NOT: [fsdp-units] inserted
