"""PyTorch's data-parallel baselines for bench/multi_gpu.sh scaling: the model of
bench/torch_gpu_step.py (HF transformers, random init, SDPA) trained with DDP or FSDP2
(torch.distributed.fsdp.fully_shard, one unit per decoder layer plus the root) over NCCL,
one process per GPU, bf16 autocast over f32 parameters (the recipe zerotrain's bf16 runs
match: f32 master weights and moments), fused AdamW, random tokens. Rank 0 prints tokens/s
per GPU and the peak memory of any rank.
  torchrun --nproc_per_node 8 bench/torch_dist_step.py --preset gpt2-xl --batch 8 --mode fsdp2
Keep NCCL_NVLS_ENABLE=0 in the environment (bench/multi_gpu.sh exports it). --device cpu
runs DDP over gloo on CPU processes (how the script is tested without GPUs)."""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpu_step import PRESETS, build  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="gpt2-xl", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=8, help="micro-batch per GPU")
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--mode", default="ddp", choices=["ddp", "fsdp2"])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    a = ap.parse_args()
    cuda = a.device == "cuda"
    if not cuda and a.mode != "ddp":
        sys.exit("torch_dist_step.py: --device cpu runs --mode ddp only")

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", rank % max(1, torch.cuda.device_count() if cuda else 1)))
    if cuda:
        torch.cuda.set_device(local)
    torch.manual_seed(0)

    model, flops_per_token, vocab = build(a.preset, a.seq)
    model = model.to(device=a.device, dtype=torch.float32).train()
    if a.mode == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local] if cuda else None)
    else:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        layers = model.transformer.h if hasattr(model, "transformer") else model.model.layers
        for layer in layers:
            fully_shard(layer, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
    # fused=True on the GPU (torch 1.13's CPU AdamW has no fused argument).
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, **({"fused": True} if cuda else {}))
    tok = torch.randint(0, vocab, (a.batch, a.seq), device=a.device)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.mode == "ddp"):
            loss = model(input_ids=tok, labels=tok).loss
        loss.backward()
        opt.step()
        return loss

    def sync():
        if cuda:
            torch.cuda.synchronize()

    for _ in range(3):
        step()
    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    sync()
    secs = time.perf_counter() - t0
    peak = torch.tensor([torch.cuda.max_memory_allocated() / 2 ** 30 if cuda else 0.0], device=a.device)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    slowest = torch.tensor([secs], device=a.device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    tps_per_gpu = a.batch * a.seq * a.steps / slowest.item()
    if rank == 0:
        print(f"torch-{a.mode} {a.preset} x{world} B={a.batch} T={a.seq}: {tps_per_gpu:.0f} tokens/s per GPU, "
              f"peak memory {peak.item():.2f} GiB, loss {loss.item():.4f}")
        print(f"RESULT torch-{a.mode} gpus={world} tokens_per_s_per_gpu={tps_per_gpu:.0f} peak_gib={peak.item():.3f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
