#!/usr/bin/env python3
"""Fine-tune a real LayerNorm + MLP block with qfuse.torch.LayerNormMLP under torch.compile, next
to the same block in bf16 PyTorch.

The block is all-MiniLM-L6-v2's first FFN (hidden 384, ffn 1536) with 2048 rows of its real
input activations, as `make demo` fetches them (scripts/get-real-weights writes
out/data/block.safetensors). The task, as the demo's: start from the block's weights perturbed
by 0.5 rms(W) N(0, 1) and recover the block's own output y* = fc2(gelu(fc1(ln(x)))) (fp32, tanh
gelu) with Adam on fp32 weights. The loss is ||y - y*||^2 / ||y*||^2.

    python3 examples/finetune_mlp.py [--recipes mxfp8,nvfp4,fp8_current,fp8_delayed] [--steps 200]
                                     [--block out/data/block.safetensors] [--csv F] [--plot F]

Needs a CUDA GPU, PyTorch and safetensors (pip install safetensors); run from the checkout after
`make` (or after `pip install .`).
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--block", default=os.path.join(HERE, "..", "out", "data",
                                                   "block.safetensors"))
    p.add_argument("--recipes", default="mxfp8,nvfp4,fp8_current,fp8_delayed",
                   help="comma-separated qfuse recipes (names or .lua paths)")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--no-compile", action="store_true", help="run eagerly")
    p.add_argument("--csv", help="write every step's loss here")
    p.add_argument("--plot", help="draw the loss curves into this .png (matplotlib)")
    args = p.parse_args(argv)
    if args.steps < 1:
        p.error("--steps must be at least 1")
    return args


def load_block(path, torch):
    try:
        from safetensors.torch import load_file
    except ImportError:
        sys.exit("finetune_mlp: needs the safetensors package (pip install safetensors)")
    if not os.path.exists(path):
        sys.exit("finetune_mlp: %s not found: run `make demo` (or scripts/get-real-weights "
                 "out/data) first" % path)
    t = load_file(path, device="cuda")
    for name in ("x", "ln.weight", "ln.bias", "fc1.weight", "fc1.bias", "fc2.weight",
                 "fc2.bias"):
        if name not in t:
            sys.exit("finetune_mlp: %s has no tensor %r" % (path, name))
    return t


class Bf16Block:
    """The same block in plain PyTorch: fp32 weights, bf16 autocast."""

    def __init__(self, torch, hidden, ffn):
        nn = torch.nn
        self.module = nn.Sequential(nn.LayerNorm(hidden, eps=1e-12), nn.Linear(hidden, ffn),
                                    nn.GELU(approximate="tanh"), nn.Linear(ffn, hidden)).cuda()

    def load(self, torch, t, w1, w2):
        m = self.module
        with torch.no_grad():
            m[0].weight.copy_(t["ln.weight"]), m[0].bias.copy_(t["ln.bias"])
            m[1].weight.copy_(w1), m[1].bias.copy_(t["fc1.bias"])
            m[3].weight.copy_(w2), m[3].bias.copy_(t["fc2.bias"])


def train(torch, name, module, forward, x, target, args):
    opt = torch.optim.Adam([p for p in module.parameters() if p.requires_grad], lr=args.lr)
    denom = target.float().pow(2).sum()
    losses = []
    t0 = time.time()
    for _ in range(args.steps):
        opt.zero_grad(set_to_none=True)
        y = forward(x)
        loss = (y.float() - target).pow(2).sum() / denom
        loss.backward()
        opt.step()
        if hasattr(module, "update_scales"):  # delayed scaling (fp8_delayed): once per step
            module.update_scales()
        losses.append(loss.item())
    torch.cuda.synchronize()
    print("%-12s %d steps in %.1f s (the first includes compiling)" % (name, args.steps,
                                                                       time.time() - t0))
    return losses


def main(argv):
    args = parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("finetune_mlp: no CUDA GPU: nothing to train (it needs one)")
        return 0
    import qfuse.torch
    t = load_block(args.block, torch)
    x = t["x"].to(torch.bfloat16)
    hidden, ffn = t["fc1.weight"].shape[1], t["fc1.weight"].shape[0]
    g = torch.Generator(device="cuda").manual_seed(7)

    def perturb(w):
        return w + 0.5 * w.pow(2).mean().sqrt() * torch.randn(w.shape, device="cuda",
                                                               generator=g)
    w1, w2 = perturb(t["fc1.weight"]), perturb(t["fc2.weight"])
    with torch.no_grad():  # the block's own output, fp32
        xn = torch.nn.functional.layer_norm(t["x"], (hidden,), t["ln.weight"], t["ln.bias"],
                                            1e-12)
        h = torch.nn.functional.gelu(xn @ t["fc1.weight"].t() + t["fc1.bias"], approximate="tanh")
        target = h @ t["fc2.weight"].t() + t["fc2.bias"]

    def maybe_compile(m):
        return m if args.no_compile else torch.compile(m, fullgraph=True, dynamic=True)

    curves = {}
    base = Bf16Block(torch, hidden, ffn)
    base.load(torch, t, w1, w2)
    fwd = maybe_compile(base.module)

    def bf16_forward(v):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return fwd(v)
    curves["bf16"] = train(torch, "bf16", base.module, bf16_forward, x, target, args)
    for recipe in [r for r in args.recipes.split(",") if r]:
        mlp = qfuse.torch.LayerNormMLP(hidden, ffn, recipe=recipe, activation="gelu", eps=1e-12,
                                       params_dtype=torch.float32)
        with torch.no_grad():
            mlp.layer_norm_weight.copy_(t["ln.weight"]), mlp.layer_norm_bias.copy_(t["ln.bias"])
            mlp.fc1_weight.copy_(w1), mlp.fc1_bias.copy_(t["fc1.bias"])
            mlp.fc2_weight.copy_(w2), mlp.fc2_bias.copy_(t["fc2.bias"])
        name = recipe if mlp.fused else recipe + " (unfused)"
        curves[name] = train(torch, name, mlp, maybe_compile(mlp), x, target, args)
    marks = sorted({0, args.steps // 10, args.steps // 4, args.steps // 2, args.steps - 1})
    print("\n| run | " + " | ".join("loss step %d" % (s + 1) for s in marks) + " | vs bf16 |")
    print("|---|" + "---|" * (len(marks) + 1))
    ref = curves["bf16"][-1]
    for name, c in curves.items():
        print("| %s | %s | %.2fx |" % (name, " | ".join("%.3e" % c[s] for s in marks),
                                       c[-1] / ref))
    if args.csv:
        with open(args.csv, "w") as f:
            f.write("step," + ",".join(curves) + "\n")
            for s in range(args.steps):
                f.write("%d,%s\n" % (s + 1, ",".join("%.6e" % c[s] for c in curves.values())))
        print("wrote %s" % args.csv)
    if args.plot:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("finetune_mlp: no matplotlib (pip install matplotlib): %s not drawn" % args.plot)
            return 0
        for name, c in curves.items():
            plt.semilogy(range(1, args.steps + 1), c, label=name)
        plt.xlabel("Adam step")
        plt.ylabel("||y - y*||^2 / ||y*||^2")
        plt.title("LayerNorm + MLP (all-MiniLM-L6-v2 layer 0): qfuse recipes vs bf16")
        plt.legend()
        plt.savefig(args.plot, dpi=120)
        print("wrote %s" % args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
