// Inputs/preamble_model.h: the model of preamble.cpp, which copies this header and edits the copy.
#pragma once
#include <torch/torch.h>

struct Net : torch::nn::Module {
  torch::Tensor forward(torch::Tensor x) { return x; }
};

// A header's own template used with the lambda of a static function: an instantiation the preamble leaves pending
// that no other translation unit could provide, which every parse over the preamble still performs.
template <class F> int call_with_one(const F& f) { return f(1); }
static inline int header_use() { return call_with_one([](int x) { return x + 1; }); }
