#!/usr/bin/env python3
"""PyTorch's collectives measured as `zerotrain bench comm` measures its own, for a side by side
comparison (bench/comm_bench.sh): the same flags, sizes, input pattern, check, columns and JSON.

  python3 -m torch.distributed.run --nproc_per_node 2 bench/torch_comm.py [flags]
  mpirun -np 2 python3 bench/torch_comm.py [flags]        (OMPI_COMM_WORLD_* variables)
  python3 bench/torch_comm.py [flags]                     (one process)

Backends: nccl for --device cuda (one GPU per rank, by local rank), gloo for --device cpu.
What a backend lacks is reported, not a crash: gloo (torch 1.13) has no reduce_scatter, so
that op prints "n/a"; it has no bfloat16, so --dtype bf16 falls back to f32 at the same byte
sizes (said in the header and in each row's dtype). all_gather uses all_gather_into_tensor
where the backend has it, else the list form into views of the output (gloo).

Columns are nccl-tests' (see `zerotrain bench --help`): size = per-rank buffer bytes
(all_reduce the buffer, reduce_scatter the input, all_gather the output); count = elements per
rank; time = slowest rank's mean us per collective; algbw = size/time; busbw = algbw x
2(n-1)/n (all_reduce) or (n-1)/n; #wrong = elements differing from the exact result.
"""
import argparse
import json
import os
import re
import sys
import tempfile
import time

import torch
import torch.distributed as dist

OPS = ("all_reduce", "reduce_scatter", "all_gather")
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def byte_size(flag):
    def parse(text):
        m = re.fullmatch(r"(\d{1,12})([kKmMgG]?)(i?[bB])?", text)
        if not m:
            raise argparse.ArgumentTypeError(f"{flag} expects a byte size such as 4096, 64K, 16M or 1G, got '{text}'")
        value = int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2).upper()]
        if value < 1:
            raise argparse.ArgumentTypeError(f"{flag} must be at least 1 byte, got '{text}'")
        return value
    return parse


def op_list(text):
    ops = []
    for name in text.split(","):
        if name not in OPS:
            raise argparse.ArgumentTypeError(f"unknown collective '{name}'; choose from {', '.join(OPS)}")
        if name not in ops:
            ops.append(name)
    return ops


def at_least(minimum):
    def parse(text):
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value
    return parse


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--ops", type=op_list, default=list(OPS))
    p.add_argument("--dtype", choices=tuple(DTYPES), default="f32")
    p.add_argument("--min-bytes", type=byte_size("--min-bytes"), default=1 << 10)
    p.add_argument("--max-bytes", type=byte_size("--max-bytes"), default=64 << 20)
    p.add_argument("--factor", type=at_least(2), default=2)
    p.add_argument("--warmup", type=at_least(0), default=5)
    p.add_argument("--iters", type=at_least(1), default=20)
    p.add_argument("--check", choices=("on", "off"), default="on")
    p.add_argument("--json", default="")
    a = p.parse_args()
    if a.min_bytes > a.max_bytes:
        p.error(f"--min-bytes ({a.min_bytes}) is larger than --max-bytes ({a.max_bytes})")
    return a


def init_process_group(device):
    """torchrun sets RANK/WORLD_SIZE/LOCAL_RANK; mpirun sets OMPI_COMM_WORLD_*; neither: one process."""
    env = os.environ
    rank = int(env.get("RANK", env.get("OMPI_COMM_WORLD_RANK", "0")))
    world = int(env.get("WORLD_SIZE", env.get("OMPI_COMM_WORLD_SIZE", "1")))
    local = int(env.get("LOCAL_RANK", env.get("OMPI_COMM_WORLD_LOCAL_RANK", "0")))
    env.setdefault("MASTER_ADDR", "127.0.0.1")
    env.setdefault("MASTER_PORT", "29533")
    if device == "cuda":
        torch.cuda.set_device(local % torch.cuda.device_count())
    backend = "nccl" if device == "cuda" else "gloo"
    dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world)
    return torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device("cpu")


def pattern(rank, ranks, first, count, dev):
    """The same small integers as zerotrain (cli/bench_comm.cpp): exact in f32 and bf16 sums."""
    m = min(8, max(1, 128 // ranks))
    idx = torch.arange(first, first + count, dtype=torch.int64, device=dev)
    return ((idx + 1) * (2 * rank + 3) + rank) % (2 * m + 1) - m


def pattern_sum(ranks, first, count, dev):
    return sum(pattern(r, ranks, first, count, dev) for r in range(ranks))


class Case:
    """One collective at one size: buffers, start, fill, check (as zerotrain's Case)."""

    def __init__(self, op, target_bytes, dtype, dev, rank, ranks, impl):
        self.op, self.rank, self.ranks, self.dev, self.impl = op, rank, ranks, dev, impl
        elements = target_bytes // torch.tensor([], dtype=dtype).element_size()
        if op == "all_reduce":
            self.count = max(1, elements)
            self.input, self.output = torch.empty(self.count, dtype=dtype, device=dev), None
        else:
            self.count = max(1, elements // ranks)
            part = torch.empty(self.count, dtype=dtype, device=dev)
            whole = torch.empty(self.count * ranks, dtype=dtype, device=dev)
            self.input, self.output = (whole, part) if op == "reduce_scatter" else (part, whole)
        per_rank = self.output if op == "all_gather" else self.input
        self.bytes = per_rank.numel() * per_rank.element_size()

    def run(self):
        if self.op == "all_reduce":
            dist.all_reduce(self.input)
        elif self.impl == "tensor":
            fn = dist.reduce_scatter_tensor if self.op == "reduce_scatter" else dist.all_gather_into_tensor
            fn(self.output, self.input)
        elif self.op == "reduce_scatter":
            dist.reduce_scatter(self.output, list(self.input.chunk(self.ranks)))
        else:
            dist.all_gather(list(self.output.chunk(self.ranks)), self.input)

    def fill(self):
        self.input.copy_(pattern(self.rank, self.ranks, 0, self.input.numel(), self.dev))
        if self.output is not None:
            self.output.zero_()

    def count_wrong(self):
        if self.op == "all_reduce":
            got, want = self.input, pattern_sum(self.ranks, 0, self.count, self.dev)
        elif self.op == "reduce_scatter":
            got, want = self.output, pattern_sum(self.ranks, self.rank * self.count, self.count, self.dev)
        else:
            got = self.output
            want = torch.cat([pattern(r, self.ranks, 0, self.count, self.dev) for r in range(self.ranks)])
        return int((got.float() != want.float()).sum())


def supported_impl(op, dtype, dev, ranks):
    """How this backend runs `op` on `dtype` ("tensor" or "list"), or (None, reason). Unsupported
    ops fail locally and alike on every rank, before any communication."""
    errors = []
    for impl in (("plain",) if op == "all_reduce" else ("tensor", "list")):
        try:
            c = Case(op, 16 * ranks * 4, dtype, dev, dist.get_rank(), ranks, impl)
            c.fill()
            c.run()
            return impl, ""
        except (RuntimeError, AttributeError) as e:
            errors.append(str(e).splitlines()[0])
    return None, "; ".join(errors)


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def time_us(case, dev, warmup, iters):
    for _ in range(warmup):
        case.run()
    sync(dev)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        case.run()  # NCCL: queued on the stream; gloo: blocking
    sync(dev)
    return (time.perf_counter() - t0) / iters * 1e6


def agree(value, dev, op, dtype):
    t = torch.tensor([value], dtype=dtype, device=dev)
    dist.all_reduce(t, op=op)
    return t.item()


def sweep_sizes(lo, hi, factor):
    sizes, s = [], lo
    while s <= hi:
        sizes.append(s)
        s *= factor
    return sizes


def busbw_factor(op, n):
    return 2.0 * (n - 1) / n if op == "all_reduce" else (n - 1) / n


def write_json_atomic(path, doc):
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".torch_comm.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main():
    a = parse_args()
    dev = init_process_group(a.device)
    rank, ranks = dist.get_rank(), dist.get_world_size()
    printer = rank == 0
    say = (lambda *x: print(*x, flush=True)) if printer else (lambda *x: None)
    backend = dist.get_backend()
    dtype_name, dtype = a.dtype, DTYPES[a.dtype]

    notes, unsupported, impls = [], {}, {}
    if dtype_name == "bf16" and supported_impl("all_reduce", dtype, dev, ranks)[0] is None:
        notes.append(f"bf16: {backend} in torch {torch.__version__} has no bfloat16; measuring f32 at the same byte sizes")
        dtype_name, dtype = "f32", torch.float32
    for op in a.ops:
        impl, reason = supported_impl(op, dtype, dev, ranks)
        if impl is None:
            unsupported[op] = f"{backend} in torch {torch.__version__} does not support it ({reason})"
        else:
            impls[op] = impl
            if impl == "list":
                notes.append(f"{op}: {backend} has no tensor form of it here; using the list form (views of one tensor)")

    device_text = "cpu" if dev.type == "cpu" else f"cuda:{dev.index} {torch.cuda.get_device_name(dev)}"
    say("# torch comm (nccl-tests columns, as zerotrain bench comm)")
    say(f"# world size {ranks}, backend {backend}, device {device_text}, dtype {dtype_name}, torch {torch.__version__}")
    say(f"# sizes {a.min_bytes}..{a.max_bytes} B x{a.factor}, warmup {a.warmup}, iters {a.iters}, check {a.check}")
    for n in notes:
        say(f"# note: {n}")
    say("#")
    say("# %12s  %12s  %5s  %14s  %10s  %8s  %8s  %6s" % ("size", "count", "type", "op", "time", "algbw", "busbw", "#wrong"))
    say("# %12s  %12s  %5s  %14s  %10s  %8s  %8s" % ("(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)"))

    rows = []
    for op in a.ops:
        if op in unsupported:
            say(f"  {'n/a':>12}  {'n/a':>12}  {dtype_name:>5}  {op:>14}  n/a: {unsupported[op]}")
            continue
        for target in sweep_sizes(a.min_bytes, a.max_bytes, a.factor):
            case = Case(op, target, dtype, dev, rank, ranks, impls[op])
            case.fill()
            t = agree(time_us(case, dev, a.warmup, a.iters), dev, dist.ReduceOp.MAX, torch.float64)
            algbw = case.bytes / (t * 1e3) if t > 0 else 0.0
            busbw = algbw * busbw_factor(op, ranks)
            wrong = None
            if a.check == "on":
                if op == "all_reduce":  # in place: the timed loop summed sums; one checked run
                    case.fill()
                    case.run()
                    sync(dev)
                wrong = int(agree(case.count_wrong(), dev, dist.ReduceOp.SUM, torch.int64))
            rows.append(dict(op=op, bytes=case.bytes, count=case.count, dtype=dtype_name, time_us=t,
                             algbw_gbs=algbw, busbw_gbs=busbw, wrong=wrong))
            say("  %12d  %12d  %5s  %14s  %10.2f  %8.2f  %8.2f  %6s" % (
                case.bytes, case.count, dtype_name, op, t, algbw, busbw, "N/A" if wrong is None else wrong))

    avg = {}
    for op in a.ops:
        mine = [r["busbw_gbs"] for r in rows if r["op"] == op]
        if mine:
            avg[op] = sum(mine) / len(mine)
            say(f"# avg busbw {op:<14} : {avg[op]:.3f} GB/s over {len(mine)} sizes")
        else:
            say(f"# avg busbw {op:<14} : n/a")
    total_wrong = sum(r["wrong"] or 0 for r in rows)
    say("# wrong elements : not checked (--check off)" if a.check == "off"
        else f"# wrong elements : {total_wrong} {'FAILED' if total_wrong else 'OK'}")
    if printer and a.json:
        write_json_atomic(a.json, dict(tool="torch", torch=torch.__version__, world_size=ranks, backend=backend,
                                       device=device_text, dtype=dtype_name, requested_dtype=a.dtype,
                                       warmup=a.warmup, iters=a.iters, check=a.check == "on", rows=rows,
                                       avg_busbw_gbs=avg, unsupported=unsupported, notes=notes))
    dist.barrier()
    dist.destroy_process_group()
    return 1 if total_wrong else 0


if __name__ == "__main__":
    sys.exit(main())
