"""The reference workloads as a plain Python training loop: bench/train_ref.cpp in Python.

  train_ref.py --form accelerate|torch WORKLOAD INPUT_DIR STEPS WARMUP [DTYPE]

--form accelerate is form (c) of the side-by-side benchmark, the loop ported to Hugging Face Accelerate
(Accelerator, prepare, accelerator.backward; mixed precision from ACCELERATE_MIXED_PRECISION, processes from
torchrun's environment); --form torch is form (d), plain PyTorch on one device. Reads the same WORKLOAD.weights and
WORKLOAD.data as the C++ program and prints the same two lines: the mean wall-clock and CPU time of the last STEPS
steps, and every step's loss. DTYPE (float32 or float64) as in the C++ program.
"""

import argparse
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

CONFIGS = {  # vocab, dim, heads, layers, context, batch (shared/DESIGN.md §6)
    "gpt-small": (256, 128, 4, 2, 64, 8),
    "gpt-86m": (256, 768, 12, 12, 1024, 16),
}
MLP_BATCH = 64


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(784, 512), nn.Linear(512, 512), nn.Linear(512, 10)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.qkv, self.proj = nn.LayerNorm(dim), nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.ln2, self.fc, self.fc2 = nn.LayerNorm(dim), nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        batch, time_, dim = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(batch, time_, 3, self.heads, dim // self.heads).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, time_, dim))
        return x + self.fc2(F.gelu(self.fc(self.ln2(x))))


class Gpt(nn.Module):
    def __init__(self, vocab, dim, heads, layers, context):
        super().__init__()
        self.token, self.position = nn.Embedding(vocab, dim), nn.Embedding(context, dim)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(layers)])
        self.ln, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab)

    def forward(self, tokens):
        positions = torch.arange(tokens.size(1), device=tokens.device)
        return self.head(self.ln(self.blocks(self.token(tokens) + self.position(positions))))


def make_model(workload):
    if workload == "mlp-mnist":
        return Mlp()
    if workload in CONFIGS:
        return Gpt(*CONFIGS[workload][:5])
    sys.exit(f"train_ref.py: unknown workload '{workload}' (use mlp-mnist, gpt-small or gpt-86m)")


def batch_size(workload):
    return MLP_BATCH if workload == "mlp-mnist" else CONFIGS[workload][5]


def read_tensors(path):
    """Reads the ABT1 format of bench/bench_tensors.h."""
    with open(path, "rb") as f:
        magic, count = f.readline().split()
        if magic != b"ABT1":
            sys.exit(f"train_ref.py: '{path}' is not a benchmark tensor file (no 'ABT1' header)")
        entries = []
        for _ in range(int(count)):
            name, kind, ndim, *dims = f.readline().decode().split()
            entries.append((name, np.float32 if kind == "f32" else np.int64, [int(d) for d in dims[: int(ndim)]]))
        tensors = {}
        for name, dtype, shape in entries:
            n = math.prod(shape)
            array = np.fromfile(f, dtype=dtype, count=n)
            if array.size != n:
                sys.exit(f"train_ref.py: '{path}' ends inside tensor '{name}'")
            tensors[name] = torch.from_numpy(array.reshape(shape))
        return tensors


def write_tensors(path, tensors):
    with open(path, "wb") as f:
        f.write(f"ABT1 {len(tensors)}\n".encode())
        for name, t in tensors.items():
            kind = {torch.float32: "f32", torch.int64: "i64"}[t.dtype]
            f.write(f"{name} {kind} {t.dim()} {' '.join(str(d) for d in t.shape)}\n".encode())
        for t in tensors.values():
            f.write(t.contiguous().numpy().tobytes())


def load(workload, input_dir, dtype=torch.float32):
    model = make_model(workload)
    weights = read_tensors(os.path.join(input_dir, f"{workload}.weights"))
    names = dict(model.named_parameters())
    if set(weights) != set(names):
        sys.exit(f"train_ref.py: weights file names {sorted(set(weights) ^ set(names))} do not match the model")
    with torch.no_grad():
        for name, parameter in names.items():
            parameter.copy_(weights[name])
    model.to(dtype)
    data = read_tensors(os.path.join(input_dir, f"{workload}.data"))
    if workload == "mlp-mnist":
        dataset = torch.utils.data.TensorDataset(data["images"].to(dtype), data["labels"])
    else:
        tokens = data["tokens"]
        dataset = torch.utils.data.TensorDataset(tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous())
    return model, torch.utils.data.DataLoader(dataset, batch_size=batch_size(workload), shuffle=False)


def compute_loss(model, inputs, targets):
    logits = model(inputs)
    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def run(loader, steps, warmup, step_fn, synchronize):
    losses, step, start, cpu_start = [], 0, time.perf_counter(), time.process_time()
    while step < warmup + steps:
        for inputs, targets in loader:
            if step == warmup:
                synchronize()
                start, cpu_start = time.perf_counter(), time.process_time()
            losses.append(step_fn(inputs, targets))
            step += 1
            if step == warmup + steps:
                break
    synchronize()
    return (time.perf_counter() - start) * 1000 / steps, (time.process_time() - cpu_start) * 1000 / steps, losses


def report(step_ms, cpu_ms, batch, losses):
    print(f"step_ms {step_ms:.6g} cpu_ms {cpu_ms:.6g} batch {batch}", flush=True)
    print("losses " + " ".join(f"{v:.17g}" for v in torch.stack(losses).tolist()), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--form", choices=["accelerate", "torch"], required=True)
    parser.add_argument("workload")
    parser.add_argument("input_dir")
    parser.add_argument("steps", type=int)
    parser.add_argument("warmup", type=int)
    parser.add_argument("dtype", nargs="?", choices=["float32", "float64"], default="float32")
    args = parser.parse_args()
    model, loader = load(args.workload, args.input_dir, getattr(torch, args.dtype))

    if args.form == "accelerate":
        from accelerate import Accelerator

        # On a machine without CUDA, Accelerate forms a process group (gloo) only when told it is on the CPU.
        accelerator = Accelerator(cpu=not torch.cuda.is_available())
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        sync = torch.cuda.synchronize if accelerator.device.type == "cuda" else (lambda: None)

        def step(inputs, targets):
            optimizer.zero_grad()
            loss = compute_loss(model, inputs, targets)
            accelerator.backward(loss)
            optimizer.step()
            return loss.detach()

        step_ms, cpu_ms, losses = run(loader, args.steps, args.warmup, step, sync)
        if accelerator.is_main_process:
            report(step_ms, cpu_ms, batch_size(args.workload), losses)
        accelerator.end_training()
        return

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def step(inputs, targets):
        inputs, targets = inputs.to(device), targets.to(device)
        optimizer.zero_grad()
        loss = compute_loss(model, inputs, targets)
        loss.backward()
        optimizer.step()
        return loss.detach()

    step_ms, cpu_ms, losses = run(loader, args.steps, args.warmup, step, sync)
    report(step_ms, cpu_ms, batch_size(args.workload), losses)


if __name__ == "__main__":
    main()
