#!/usr/bin/env python3
"""Writes grad_scaler_sequence.txt: what torch.amp.GradScaler does over crafted runs with injected inf/nan.

The oracle of test/runtime/precision_unit_test.cpp (GradScaler.*MatchesTorchAmpGradScaler). Run with the
project's torch (2.11.0):  python test/data/make_grad_scaler_sequence.py > test/data/grad_scaler_sequence.txt

Each run trains one float32 parameter p (8 values, linspace(-1, 1)) on loss = (p * x_step).sum(), with
x_step = sin(arange(8) + 0.37 * step), through scaler.scale(loss).backward(), scaler.step(optimizer),
scaler.update(); after the backward, chosen steps overwrite one (scaled) gradient value with inf or nan.
A step is skipped exactly when update() backs the scale off, so `skipped` is read from the scale.

Format (whitespace-separated):
  run <name> <optimizer> <init_scale> <growth_factor> <backoff_factor> <growth_interval> <steps>
  inject <step> <index> <inf|-inf|nan>      (the run's injections)
  event <step> <scale after update> <skipped 0|1>   (only steps where the scale changed or the step skipped)
  final <p[0]> ... <p[7]>                     (%.9g)
  end
"""
import math

import torch

RUNS = [
    # name, optimizer, init_scale, growth_factor, backoff_factor, growth_interval, steps, injections
    ("adam-defaults", "adam", 65536.0, 2.0, 0.5, 2000, 4200,
     [(3, 0, "inf"), (4, 5, "nan"), (10, 7, "-inf"), (2100, 2, "inf"), (4150, 1, "nan")]),
    ("adamw-fast-growth", "adamw", 1024.0, 2.0, 0.25, 3, 60,
     [(0, 0, "inf"), (5, 3, "nan"), (6, 3, "nan"), (7, 4, "inf"), (20, 6, "inf"), (33, 0, "-inf"),
      (34, 1, "nan"), (50, 2, "inf")]),
    ("sgd-momentum", "sgd", 256.0, 3.0, 0.5, 4, 50,
     [(1, 0, "inf"), (2, 1, "inf"), (9, 2, "nan"), (30, 7, "inf")]),
    ("rmsprop-plain", "rmsprop", 4096.0, 2.0, 0.5, 5, 40,
     [(2, 0, "nan"), (13, 5, "inf"), (14, 6, "inf"), (27, 3, "-inf")]),
]


def make_optimizer(kind, params):
    if kind == "adam":
        return torch.optim.Adam(params, lr=1e-2, fused=True)
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.01, fused=True)
    if kind == "sgd":
        return torch.optim.SGD(params, lr=1e-2, momentum=0.9, fused=True)
    if kind == "rmsprop":  # no fused kernel: GradScaler unscales, reads found_inf, then steps
        return torch.optim.RMSprop(params, lr=1e-3)
    raise ValueError(kind)


def main():
    torch.set_num_threads(1)
    print(f"# torch {torch.__version__}; written by test/data/make_grad_scaler_sequence.py")
    for name, kind, init, growth, backoff, interval, steps, injections in RUNS:
        p = torch.nn.Parameter(torch.linspace(-1, 1, 8, dtype=torch.float32))
        optimizer = make_optimizer(kind, [p])
        scaler = torch.amp.GradScaler("cpu", init_scale=init, growth_factor=growth, backoff_factor=backoff,
                                      growth_interval=interval)
        print("run", name, kind, init, growth, backoff, interval, steps)
        for step, index, value in injections:
            print("inject", step, index, value)
        inject = {step: (index, value) for step, index, value in injections}
        previous = init
        for step in range(steps):
            optimizer.zero_grad()
            x = torch.sin(torch.arange(8, dtype=torch.float32) + 0.37 * step)
            loss = (p * x).sum()
            scaler.scale(loss).backward()
            if step in inject:
                index, value = inject[step]
                with torch.no_grad():
                    p.grad[index] = float(value)
            scaler.step(optimizer)
            scaler.update()
            scale = scaler.get_scale()
            skipped = scale < previous
            if skipped or scale != previous:
                print("event", step, repr(scale), int(skipped))
            previous = scale
        print("final", " ".join("%.9g" % v for v in p.detach().tolist()))
        print("end")


if __name__ == "__main__":
    main()
