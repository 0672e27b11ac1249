#!/usr/bin/env python3
"""PyTorch oracle for tests/e2e/optimizer_parity_test.cpp.

    optimizer_oracle.py DIR CASE [CASE ...]

For each CASE, reads DIR/CASE.in.safetensors: initial parameters "p.<name>", gradients
"g<k>.<name>" for k = 0..steps-1, and metadata "config" (JSON: type, hyper-parameters,
per-step lr list, grad_scale, no-decay parameter names). Runs the steps with PyTorch in
float32 -- torch.optim.AdamW, torch.optim.Adam (L2 weight decay), torch.optim.SGD, and Lion
by its published update -- with the no-decay parameters in a second param group of
weight_decay 0, as HF Trainer groups them. Writes the final parameters to
DIR/CASE.out.safetensors as "p.<name>" (the float32 run) and, from a float64 run of the same
steps, "hi.<name>" + "lo.<name>" (float32 pair whose sum is the float64 result; the C++
reader takes no F64), so the test can hold our error against PyTorch's own float32 error.
16-bit inputs are widened: the float32 run is the f32 master the C++ side keeps.

Exit codes: 0 ok, 3 torch unavailable, 1 anything else.
"""
import json
import os
import sys

try:
    import torch
except ImportError:
    print("torch is not installed", file=sys.stderr)
    sys.exit(3)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import st  # noqa: E402


class Lion(torch.optim.Optimizer):
    """Lion (Chen et al. 2023), as lucidrains/lion-pytorch writes it:
    p *= 1 - lr*wd; p -= lr * sign(b1*m + (1-b1)*g); m = b2*m + (1-b2)*g."""

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            lr, wd = group["lr"], group["weight_decay"]
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if len(state) == 0:
                    state["exp_avg"] = torch.zeros_like(p)
                    # Steps where sign(c) is a coin toss: |c| within a few roundings
                    # of zero, where any order of the same float operations may flip it.
                    state["ambiguous"] = torch.zeros_like(p)
                exp_avg = state["exp_avg"]
                p.mul_(1 - lr * wd)
                a, b = exp_avg * beta1, p.grad * (1 - beta1)
                c = a + b
                tie = c.abs() <= 8 * torch.finfo(p.dtype).eps * (a.abs() + b.abs())
                state["ambiguous"] += tie.to(p.dtype)
                update = exp_avg.clone().mul_(beta1).add(p.grad, alpha=1 - beta1).sign_()
                p.add_(update, alpha=-lr)
                exp_avg.mul_(beta2).add_(p.grad, alpha=1 - beta2)


def make_optimizer(cfg, groups):
    t = cfg["type"]
    betas = (cfg["beta1"], cfg["beta2"])
    if t == "AdamW" or (t == "Adam" and cfg["adam_w_mode"]):
        return torch.optim.AdamW(groups, lr=cfg["lr"][0], betas=betas, eps=cfg["eps"])
    if t == "Adam":
        return torch.optim.Adam(groups, lr=cfg["lr"][0], betas=betas, eps=cfg["eps"])
    if t == "SGD":
        return torch.optim.SGD(groups, lr=cfg["lr"][0], momentum=cfg["momentum"], dampening=cfg["dampening"],
                               nesterov=cfg["nesterov"])
    if t == "Lion":
        return Lion(groups, lr=cfg["lr"][0], betas=betas)
    raise ValueError(f"unknown optimizer type {t}")


def run(tensors, cfg, dtype):
    names = sorted(k[2:] for k in tensors if k.startswith("p."))
    params = {n: tensors["p." + n].to(dtype).clone() for n in names}
    no_decay = set(cfg["no_decay"])
    groups = [
        {"params": [params[n] for n in names if n not in no_decay], "weight_decay": cfg["weight_decay"]},
        {"params": [params[n] for n in names if n in no_decay], "weight_decay": 0.0},
    ]
    opt = make_optimizer(cfg, groups)
    scale = torch.tensor(cfg["grad_scale"], dtype=dtype)
    for k, lr in enumerate(cfg["lr"]):
        for n in names:
            # The C++ kernels multiply the gradient by grad_scale first; so do we.
            params[n].grad = tensors[f"g{k}.{n}"].to(dtype) * scale
        for g in opt.param_groups:
            g["lr"] = lr
        opt.step()
    ambiguous = {n: opt.state[p]["ambiguous"] for n, p in params.items() if "ambiguous" in opt.state[p]}
    return {n: p.detach() for n, p in params.items()}, ambiguous


def run_case(directory, case):
    tensors, metadata = st.load_file(os.path.join(directory, case + ".in.safetensors"))
    cfg = json.loads(metadata["config"])
    out = {}
    result, ambiguous = run(tensors, cfg, torch.float32)
    for n, p in result.items():
        out["p." + n] = p
    # Lion: per element, the steps whose update sign was a tie in float32 (see Lion.step).
    for n, count in ambiguous.items():
        out["tie." + n] = count
    for n, p in run(tensors, cfg, torch.float64)[0].items():
        hi = p.float()
        out["hi." + n] = hi
        out["lo." + n] = (p - hi.double()).float()
    st.save_file(out, os.path.join(directory, case + ".out.safetensors"))


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 1
    torch.set_num_threads(1)
    for case in argv[2:]:
        run_case(argv[1], case)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
