#!/usr/bin/env python3
"""Python's safetensors reads what Accelerator::save_model writes, and we read what Python writes.

    safetensors_interop.py --tool build/bin/safetensors_tool --work /tmp/dir

1. `safetensors_tool write-sample` saves a module holding fp32, fp64, fp16, bf16, fp8 (e4m3, e5m2), int64 and
   bool tensors, a transposed (non-contiguous) weight and a tied weight, through Accelerator::save_model.
2. `safetensors.torch.load_file` reads it; every tensor must have the expected dtype, shape and values.
3. `safetensors.torch.save_file` writes the tensors back, and `safetensors_tool compare` checks that our
   reader finds the same bits in Python's file as in ours.
4. `safetensors_tool write-sample DIR 100` saves the same module in shards of at most 100 bytes (at least 3):
   the index is Accelerate's ({"metadata": {"total_size"}, "weight_map"}), and Accelerate's
   `load_checkpoint_in_model` loads the folder into a module of the same names, every tensor bit for bit.
   Saving it again unsharded into the same folder leaves model.safetensors alone (no stale shard or index),
   and `safe_serialization(false)` is refused with a message naming the fix.
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
    code = subprocess.run([args.tool, "compare", ours, theirs]).returncode
    if code != 0:
        return code
    return check_sharded(args, expected)


def check_sharded(args, expected) -> int:
    """save_model's shards: Accelerate's index, loaded by Accelerate's load_checkpoint_in_model bit for bit."""
    import json
    import shutil

    import torch
    from safetensors import safe_open
    try:
        from accelerate.utils import load_checkpoint_in_model
    except ImportError as error:
        print(f"SKIPPED: the sharded case needs Python Accelerate ({error}); scripts/bootstrap.sh installs it")
        return SKIP

    folder = os.path.join(args.work, "sharded")
    shutil.rmtree(folder, ignore_errors=True)
    subprocess.run([args.tool, "write-sample", folder, "100"], check=True)
    shards = sorted(name for name in os.listdir(folder) if name.endswith(".safetensors"))
    problems = []
    if len(shards) < 3 or "model.safetensors" in shards:
        problems.append(f"expected at least 3 shards and no model.safetensors, found {shards}")
    if any(name != f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i, name in enumerate(shards)):
        problems.append(f"shard names are not transformers' model-0000i-of-0000N.safetensors: {shards}")
    with open(os.path.join(folder, "model.safetensors.index.json")) as file:
        index = json.load(file)
    sizes = {name: tensor.numel() * tensor.element_size() for name, tensor in expected.items()}
    if set(index) != {"metadata", "weight_map"} or index["metadata"] != {"total_size": sum(sizes.values())}:
        problems.append(f"the index is not Accelerate's: {index.get('metadata')}, keys {sorted(index)}")
    if set(index.get("weight_map", {})) != set(expected) or set(index["weight_map"].values()) != set(shards):
        problems.append(f"the weight map does not map every tensor to a shard: {index.get('weight_map')}")
    for shard in shards:
        with safe_open(os.path.join(folder, shard), framework="pt") as handle:
            if handle.metadata() != {"format": "pt"} or any(index["weight_map"][k] != shard for k in handle.keys()):
                problems.append(f"{shard}: metadata {handle.metadata()}, tensors {list(handle.keys())}")

    class Holder(torch.nn.Module):
        pass

    model = Holder()
    for name, want in expected.items():  # zeros of every tensor's dtype and shape, under its dotted name
        owner = model
        *path, leaf = name.split(".")
        for part in path:
            if not hasattr(owner, part):
                owner.add_module(part, Holder())
            owner = getattr(owner, part)
        owner.register_buffer(leaf, torch.zeros(want.shape, dtype=want.dtype))
    load_checkpoint_in_model(model, folder, strict=True)
    state = model.state_dict()
    for name, want in expected.items():
        got = state[name]
        if got.dtype != want.dtype or got.shape != want.shape or \
                not torch.equal(got.contiguous().view(torch.uint8), want.contiguous().view(torch.uint8)):
            problems.append(f"{name}: load_checkpoint_in_model gave {got.dtype}{list(got.shape)} {got}, expected {want}")

    subprocess.run([args.tool, "write-sample", folder], check=True)
    left = sorted(name for name in os.listdir(folder) if not name.startswith("."))
    if left != ["model.pt", "model.safetensors"]:
        problems.append(f"an unsharded save into the sharded folder must leave model.safetensors alone: {left}")
    refusal = subprocess.run([args.tool, "refuse-pickle", folder], capture_output=True, text=True)
    if refusal.returncode != 0 or "Drop .safe_serialization(false)" not in refusal.stdout:
        problems.append(f"safe_serialization(false) must be refused naming the fix: {refusal.stdout}{refusal.stderr}")
    if problems:
        print("FAILED: the sharded save_model:\n  " + "\n  ".join(problems))
        return 1
    print(f"Accelerate's load_checkpoint_in_model read {len(expected)} tensors from {len(shards)} shards bit for bit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
