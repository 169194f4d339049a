"""PyTorch peer of bench/train: the same model, data, batch and optimizer as Tessera's job.

    python peer_torch.py --model mlp|cnn|resnet|resnet3 --batch B --threads N --warmup W --steps S

Loads Fashion-MNIST into tensors first, then trains W untimed steps and S timed ones, slicing
batches out of the preloaded tensors in a fresh random order each epoch (Tessera shuffles too),
and prints one JSON line: examples per second over the timed steps, the loss and accuracy over
them, and the torch version. Runs under any interpreter that has torch and numpy.
"""

import sys
import time

import fmnist


def resnet():
    """examples/fashion-mnist-resnet.json in PyTorch: a strided Conv2d, ResNet's block with
    BatchNorm2d (Keras's epsilon 1e-3 and momentum 0.99, PyTorch's 0.01), then the flattened
    features joined with their global maxima."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    def bn():
        return nn.BatchNorm2d(16, eps=1e-3, momentum=0.01)

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.c0, self.b0 = nn.Conv2d(1, 16, 3, stride=2, padding=1, bias=False), bn()
            self.c1, self.b1 = nn.Conv2d(16, 16, 3, padding=1, bias=False), bn()
            self.c2, self.b2 = nn.Conv2d(16, 16, 3, padding=1, bias=False), bn()
            self.fc = nn.Linear(16 * 7 * 7 + 16, 10)

        def forward(self, x):
            x = F.relu(self.b0(self.c0(x)))
            y = F.relu(self.b1(self.c1(x)))
            x = F.max_pool2d(F.relu(x + self.b2(self.c2(y))), 2)
            return self.fc(torch.cat([x.flatten(1), x.amax(dim=(2, 3))], 1))

    return ResNet()


def resnet3():
    """examples/fashion-mnist-resnet3.json in PyTorch: a strided Conv2d stem, three residual
    blocks (16 filters; 32 at half the size with a strided 1x1 shortcut; 32), global average
    pooling, Linear. BatchNorm2d with Keras's epsilon and momentum."""
    import torch.nn as nn
    import torch.nn.functional as F

    def bn(c):
        return nn.BatchNorm2d(c, eps=1e-3, momentum=0.01)

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), bn(cout)
            self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), bn(cout)
            self.short = None
            if stride != 1 or cin != cout:
                self.short = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), bn(cout))

        def forward(self, x):
            y = self.b2(self.c2(F.relu(self.b1(self.c1(x)))))
            return F.relu((x if self.short is None else self.short(x)) + y)

    class ResNet3(nn.Module):
        def __init__(self):
            super().__init__()
            self.c0, self.b0 = nn.Conv2d(1, 16, 3, stride=2, padding=1, bias=False), bn(16)
            self.blocks = nn.Sequential(Block(16, 16, 1), Block(16, 32, 2), Block(32, 32, 1))
            self.fc = nn.Linear(32, 10)

        def forward(self, x):
            x = self.blocks(F.relu(self.b0(self.c0(x))))
            return self.fc(x.mean(dim=(2, 3)))

    return ResNet3()


def build(model):
    import torch.nn as nn

    if model == "resnet":
        return resnet()
    if model == "resnet3":
        return resnet3()
    if model == "mlp":
        return nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))
    # 28x28x1 -> conv 26x26x32 -> pool 13x13 -> conv 11x11x64 -> pool 5x5 -> 1600 -> 64 -> 10
    return nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(1600, 64), nn.ReLU(), nn.Linear(64, 10))


def main(argv):
    args = fmnist.parse_args(argv, "peer_torch.py")
    import torch
    import torch.nn.functional as F

    # Both before any parallel work: interop threads can be set only once.
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(args.seed)

    xs, ys = fmnist.load_train()
    x = torch.from_numpy(xs)
    if args.model in ("cnn", "resnet", "resnet3"):
        x = x.reshape(-1, 1, 28, 28)  # PyTorch's native NCHW
    y = torch.from_numpy(ys)
    n = len(y)
    model = build(args.model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    sizes = fmnist.batch_sizes(n, args.batch, args.warmup + args.steps)

    perm, pos = torch.randperm(n), 0
    loss_sum = correct = examples = 0.0
    t0 = None
    for step, size in enumerate(sizes):
        if step == args.warmup:
            t0 = time.perf_counter()
            loss_sum = correct = examples = 0.0
        idx = perm[pos:pos + size]
        xb, yb = x.index_select(0, idx), y.index_select(0, idx)
        logits = model(xb)
        loss = F.cross_entropy(logits, yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        # The running loss and accuracy Tessera and Keras keep too.
        loss_sum += loss.item() * size
        correct += (logits.argmax(1) == yb).sum().item()
        examples += size
        pos += size
        if pos == n:
            perm, pos = torch.randperm(n), 0
    seconds = time.perf_counter() - t0
    fmnist.report(examples, seconds, loss_sum / examples, correct / examples,
                  version=torch.__version__, threads=torch.get_num_threads())


if __name__ == "__main__":
    main(sys.argv[1:])
