#!/usr/bin/env python3
"""Python's safetensors reads what Accelerator::save_model writes, and we read what Python writes.

    safetensors_interop.py --tool build/bin/safetensors_tool --work /tmp/dir

1. `safetensors_tool write-sample` saves a module holding fp32, fp64, fp16, bf16, fp8 (e4m3, e5m2), int64 and
   bool tensors, a transposed (non-contiguous) weight and a tied weight, through Accelerator::save_model.
2. `safetensors.torch.load_file` reads it; every tensor must have the expected dtype, shape and values.
3. `safetensors.torch.save_file` writes the tensors back, and `safetensors_tool compare` checks that our
   reader finds the same bits in Python's file as in ours.
Exits 77 (a ctest skip) with the reason when torch or safetensors cannot be imported.
"""
import argparse
import os
import subprocess
import sys

SKIP = 77


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tool", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    try:
        import torch
        from safetensors import safe_open
        from safetensors.torch import load_file, save_file
    except ImportError as error:
        print(f"SKIPPED: Python's safetensors is not importable here ({error}); "
              f"install it with `{sys.executable} -m pip install safetensors` (scripts/bootstrap.sh does)")
        return SKIP

    os.makedirs(args.work, exist_ok=True)
    subprocess.run([args.tool, "write-sample", args.work], check=True)
    ours = os.path.join(args.work, "model.safetensors")
    loaded = load_file(ours)
    with safe_open(ours, framework="pt") as handle:
        metadata = handle.metadata()
    assert metadata == {"format": "pt"}, metadata

    ramp = torch.arange(12, dtype=torch.float64).reshape(3, 4) / 7 - 0.5
    expected = {
        "f32": ramp.to(torch.float32),
        "f64": ramp,
        "f16": ramp.to(torch.float16),
        "bf16": ramp.to(torch.bfloat16),
        "f8_e4m3": torch.tensor([0.5, -1.0, 2.0, 448.0]).to(torch.float8_e4m3fn),
        "f8_e5m2": torch.tensor([0.25, -3.0, 1024.0, 57344.0]).to(torch.float8_e5m2),
        "i64": torch.arange(-2, 3, dtype=torch.int64),
        "flags": torch.tensor([True, False, True]),
        "transposed": (torch.arange(6, dtype=torch.float32).reshape(2, 3) + 0.25).t(),
        "embed.weight": torch.linspace(-1, 1, 10).reshape(5, 2),
        "head.weight": torch.linspace(-1, 1, 10).reshape(5, 2),
    }
    problems = []
    if set(loaded) != set(expected):
        problems.append(f"names: got {sorted(loaded)}, expected {sorted(expected)}")
    for name, want in expected.items():
        got = loaded.get(name)
        if got is None:
            continue
        if got.dtype != want.dtype or got.shape != want.shape:
            problems.append(f"{name}: got {got.dtype}{list(got.shape)}, expected {want.dtype}{list(want.shape)}")
        elif not torch.equal(got.view(torch.uint8), want.contiguous().view(torch.uint8)):
            problems.append(f"{name}: values differ: {got} vs {want}")
    if problems:
        print("FAILED: Python's safetensors read our file differently:\n  " + "\n  ".join(problems))
        return 1
    print(f"python read {len(loaded)} tensors of {ours} as expected "
          f"({', '.join(sorted({str(t.dtype) for t in loaded.values()}))})")

    theirs = os.path.join(args.work, "python.safetensors")
    save_file({name: tensor.contiguous() for name, tensor in loaded.items()}, theirs, metadata={"format": "pt"})
    return subprocess.run([args.tool, "compare", ours, theirs]).returncode


if __name__ == "__main__":
    sys.exit(main())
