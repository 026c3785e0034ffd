# Seeded stand-in for a Penn Treebank train.txt (C4 reads one): 300 lines over a 300-word vocabulary, each line
# a walk w -> 7w + {1,2,3} (mod 300), so a language model's loss falls. Writes train.txt in the working folder.
import random

random.seed(7)
vocab = ["w%d" % i for i in range(300)]
with open("train.txt", "w") as f:
    for _ in range(300):
        n = random.randint(8, 20)
        w = random.randrange(300)
        words = []
        for _ in range(n):
            words.append(vocab[w])
            w = (w * 7 + random.choice([1, 2, 3])) % 300
        f.write(" ".join(words) + "\n")
