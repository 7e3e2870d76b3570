"""One rank of the data-parallel test (test_data_parallel.py runs it under torchrun): a LayerNormMLP
under DDP and torch.compile(fullgraph=True), amaxes MAX-reduced over the data-parallel group,
trained a few steps on this rank's shard of a global batch, for fp8_delayed and fp8_current.

Each rank checks, and exits non-zero (the message says what) when a check fails:
- after every step, the delayed-scaling state (fp8_amax, fp8_history, fp8_scale, fp8_scale_inv)
  is identical on every rank;
- current scaling: one fused forward of the shard through the module's op quantizes x with the
  same scale on every rank with the group, and with different scales without it (the shards
  differ in magnitude on purpose);
- the loss (the global mean) follows a one-process run of the same model over the whole global
  batch within --tol relative, step by step (rank 0 runs that reference);
- no graph break and one graph for the compiled module.
Rank 0 writes the losses and counts as JSON to --out.

    torchrun --standalone --nproc_per_node 2 tests/python/dp_worker.py --out r.json [--backend gloo]

The backend defaults to NCCL with one GPU per rank; gloo lets two ranks share one GPU.
"""
import argparse
import copy
import json
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))
import qfuse.ops as qops  # noqa: E402
import qfuse.torch as qt  # noqa: E402

K, F, ROWS, STEPS = 256, 512, 128, 4  # hidden, ffn, rows per rank, steps


def fail(msg):
    print("dp_worker rank %d: %s" % (dist.get_rank(), msg), file=sys.stderr, flush=True)
    sys.exit(1)


def global_batch(world, device):
    """The global batch: rank r's rows scaled by 1 + r (so that shard amaxes differ), targets."""
    g = torch.Generator(device="cpu").manual_seed(7)
    x = torch.randn(world, ROWS, K, generator=g) * torch.arange(1, world + 1).view(-1, 1, 1)
    target = torch.randn(world, ROWS, K, generator=g) * 0.5
    return x.to(device, torch.bfloat16), target.to(device)


def same_on_every_rank(t, what, step):
    got = [torch.empty_like(t) for _ in range(dist.get_world_size())]
    dist.all_gather(got, t.contiguous())
    for r, v in enumerate(got):
        if not torch.equal(v, got[0]):
            fail("step %d: %s differs between rank 0 and rank %d" % (step, what, r))


def make(recipe, device, group):
    torch.manual_seed(0)  # the same parameters on every rank and in the reference
    return qt.LayerNormMLP(K, F, recipe=recipe, activation="gelu", device=device,
                           amax_group=group)


def train(model, step_fn, x, target, update):
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        y = step_fn(x)
        loss = (y.float() - target).pow(2).mean()
        loss.backward()
        opt.step()
        update(step)
        losses.append(loss.detach())
    return losses


def current_scales_agree(device, x, group):
    """fp8_current: x's scale_inv from the module's fused forward op, gathered over the ranks."""
    m = make("fp8_current", device, group)
    w1q = [getattr(m, n) for n in m._w1_names]
    w2q = [getattr(m, n) for n in m._w2_names]
    torch.ops.qfuse.quantize_weight_(m.fc1_weight, w1q, m._layer, "fp8_current", None)
    torch.ops.qfuse.quantize_weight_(m.fc2_weight, w2q, m._layer_w2, "fp8_current", None)
    with torch.no_grad():
        out = torch.ops.qfuse.layernorm_mlp_fwd(
            x, m.fc1_weight, m.fc2_weight, m.layer_norm_weight, m.layer_norm_bias, w1q, w2q,
            m.fc1_bias, m.fc2_bias, m._layer, "fp8_current", 1, m.eps, False, 0, False, None,
            None)
    xo = qops._x_outs("fp8_current", 1, x.shape[0], K, False)
    s = out[3 + [o.name for o in xo].index("scale_inv")]
    got = [torch.empty_like(s) for _ in range(dist.get_world_size())]
    dist.all_gather(got, s)
    return all(torch.equal(g, got[0]) for g in got)


def main():
    p = argparse.ArgumentParser(description="one rank of the qfuse data-parallel test")
    p.add_argument("--backend", default="nccl", choices=("nccl", "gloo"))
    p.add_argument("--out", required=True)
    p.add_argument("--tol", type=float, default=0.02)
    args = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("dp_worker.py: no CUDA GPU: the data-parallel run needs one GPU (gloo) or two "
                 "(nccl)")
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    group = dist.group.WORLD
    xg, tg = global_batch(world, device)
    x, target = xg[rank], tg[rank]
    report = {"world": world, "backend": args.backend, "recipes": {}}

    with_group = current_scales_agree(device, x, group)
    without = current_scales_agree(device, x, None)
    if not with_group or without:
        fail("fp8_current x scale_inv: equal over ranks with the group %s, without it %s "
             "(expected True, False)" % (with_group, without))
    report["current_scale_agrees"] = [with_group, without]

    for recipe in ("fp8_delayed", "fp8_current"):
        torch._dynamo.reset()
        counters = torch._dynamo.utils.counters
        counters.clear()
        model = make(recipe, device, group)
        reference = copy.deepcopy(make(recipe, device, None)) if rank == 0 else None
        # the module compiled as one graph, DDP around it (DDP's own forward is not traceable
        # as a full graph: its logger breaks it)
        step_fn = torch.nn.parallel.DistributedDataParallel(
            torch.compile(model, fullgraph=True, dynamic=False), device_ids=[device.index])

        def update(step, model=model):
            model.update_scales()  # its amax_group: MAX over the ranks first
            if model._delayed:
                for name in ("fp8_amax", "fp8_history", "fp8_scale", "fp8_scale_inv"):
                    same_on_every_rank(getattr(model, name), recipe + " " + name, step)

        losses = train(model, step_fn, x, target, update)
        mean = torch.stack(losses)
        dist.all_reduce(mean, op=dist.ReduceOp.SUM)
        mean = (mean / world).tolist()
        breaks = sum(counters["graph_break"].values())
        if breaks:
            fail("%s: %d graph breaks: %s" % (recipe, breaks, dict(counters["graph_break"])))
        entry = {"dp_loss": mean, "graph_breaks": breaks,
                 "graphs": counters["stats"]["unique_graphs"]}
        if rank == 0:
            ref = train(reference, torch.compile(reference, fullgraph=True, dynamic=False),
                        xg.view(-1, K), tg.view(-1, K), lambda step: reference.update_scales())
            entry["one_process_loss"] = [v.item() for v in ref]
            for step, (a, b) in enumerate(zip(mean, entry["one_process_loss"])):
                if abs(a - b) > args.tol * abs(b):
                    fail("%s step %d: loss %.6g over %d ranks, %.6g in one process (tol %g)"
                         % (recipe, step, a, world, b, args.tol))
        report["recipes"][recipe] = entry
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)
        print(json.dumps(report))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
