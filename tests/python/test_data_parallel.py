"""Data-parallel training over two ranks (dp_worker.py under torchrun): LayerNormMLP under DDP
and torch.compile, amaxes MAX-reduced over the group (delayed scaling's state identical on every
rank after every step, current scaling's scale the same on every rank), the loss against a
one-process run over the same global batch, no graph break. NCCL with two GPUs; with one GPU the
two ranks share it over gloo. Skipped, saying why, without torch or a GPU."""
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (pip install torch): "
                                            "the data-parallel test needs it")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU: the data-parallel test runs on one GPU or two",
                allow_module_level=True)


def test_two_ranks(tmp_path):
    backend = "nccl" if torch.cuda.device_count() >= 2 else "gloo"
    out = tmp_path / "report.json"
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dp_worker.py")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
           "2", worker, "--backend", backend, "--out", str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=480)
    assert r.returncode == 0, "%s\nstdout:\n%s\nstderr:\n%s" % (" ".join(cmd), r.stdout[-3000:],
                                                                 r.stderr[-6000:])
    report = json.loads(out.read_text())
    print(json.dumps(report, indent=1))
    assert report["world"] == 2 and report["current_scale_agrees"] == [True, False]
    for recipe in ("fp8_delayed", "fp8_current"):
        e = report["recipes"][recipe]
        assert e["graph_breaks"] == 0
        assert len(e["dp_loss"]) == len(e["one_process_loss"]) >= 2
        assert e["dp_loss"][-1] < e["dp_loss"][0]  # it trains
