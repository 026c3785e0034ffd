# Synthetic MNIST-format IDX files (libtorch's reader needs 60000 train / 10000 test): each image is its
# class's fixed random template plus noise, so a classifier's loss falls. Seeded.
# Usage: python3 make_mnist.py OUT_DIR (numpy).
import numpy as np, struct, sys, os
out = sys.argv[1]
rng = np.random.default_rng(7)
templates = rng.integers(0, 256, size=(10, 28, 28)).astype(np.float32)
def write(prefix, n):
    labels = rng.integers(0, 10, size=n).astype(np.uint8)
    imgs = templates[labels] * 0.6 + rng.integers(0, 256, size=(n, 28, 28)) * 0.4
    imgs = imgs.clip(0, 255).astype(np.uint8)
    with open(os.path.join(out, prefix + "-images-idx3-ubyte"), "wb") as f:
        f.write(struct.pack(">IIII", 2051, n, 28, 28)); f.write(imgs.tobytes())
    with open(os.path.join(out, prefix + "-labels-idx1-ubyte"), "wb") as f:
        f.write(struct.pack(">II", 2049, n)); f.write(labels.tobytes())
write("train", 60000); write("t10k", 10000)
