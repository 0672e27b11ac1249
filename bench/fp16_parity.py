"""fp16 training through `zerotrain train` against PyTorch AMP (torch.autocast float16 +
torch.amp.GradScaler, f32 parameters and AdamW state), from the same initial weights on the
same tokens: loss curves, loss scales and skipped steps step by step (bench/fp16_parity.sh
runs the whole comparison on the GPU machine).

The data is exactly one global batch (B windows of T + 1 tokens of the repository's text,
GPT-2 tokenizer), so every step of both trainers sees the same tokens whatever order
zerotrain's loader shuffles them into (the mean loss does not depend on the row order).
The scaler runs DeepSpeed's dynamic scaling with hysteresis 1, which is GradScaler's rule:
an overflow skips the step (no update, no schedule step) and halves the scale; the scale
doubles after loss_scale_window (= growth_interval) clean steps. A high initial scale
(2^24 by default) makes the first steps overflow, so the skip path is compared too.

  python3 bench/fp16_parity.py prepare DIR [--preset gpt2] [--batch 8] [--seq 1024] [--steps 50]
                                           [--scale-power 24] [--lr 3e-4] [--device cuda]
  python3 bench/fp16_parity.py torch DIR      PyTorch's run -> DIR/torch_fp16.jsonl
  python3 bench/fp16_parity.py compare DIR    the table; exit 1 when the runs disagree
prepare writes DIR/init (an HF GPT-2 directory: random init, dropout 0, tokenizer files),
DIR/train.bin (nanoGPT u16 tokens), DIR/run.yaml and DIR/ds_fp16.json for zerotrain,
DIR/params.json for the other steps."""
import argparse
import contextlib
import glob
import json
import math
import os
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRESETS = {
    "tiny-gpt2": dict(n_layer=4, n_head=4, n_embd=128),  # a check of the script on CPU machines
    "gpt2": dict(n_layer=12, n_head=12, n_embd=768),
}


def prepare(a):
    import numpy as np
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel

    os.makedirs(a.dir, exist_ok=True)
    vocab = os.path.join(ROOT, "tests", "data", "gpt2", "vocab.json")
    merges = os.path.join(ROOT, "tests", "data", "gpt2", "merges.txt")
    # GPT-2's byte-level BPE through `tokenizers` itself: transformers 5's GPT2TokenizerFast
    # ignores vocab_file/merges_file (an empty vocabulary: every text encodes to nothing).
    bpe = models.BPE.from_file(vocab, merges)
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    eos = tok.token_to_id("<|endoftext|>")
    need = a.batch * a.seq + 1
    ids = []
    for path in sorted(glob.glob(os.path.join(ROOT, "data", "text", "*.txt"))):
        with open(path, encoding="utf-8") as f:
            ids += tok.encode(f.read()).ids + [eos]
        if len(ids) >= need:
            break
    if len(ids) < need:
        sys.exit(f"fp16_parity: the text has {len(ids)} tokens, fewer than the {need} one batch needs")
    np.asarray(ids[:need], dtype=np.uint16).tofile(os.path.join(a.dir, "train.bin"))

    p = PRESETS[a.preset]
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=p["n_layer"], n_head=p["n_head"], n_embd=p["n_embd"], vocab_size=50257,
                     n_positions=max(1024, a.seq), resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(cfg)
    init = os.path.join(a.dir, "init")
    model.save_pretrained(init, safe_serialization=True)
    shutil.copy(vocab, init)
    shutil.copy(merges, init)

    with open(os.path.join(a.dir, "run.yaml"), "w") as f:
        f.write(f"""model: {{path: '{init}'}}
data:
  train: ['{os.path.join(a.dir, "train.bin")}']
  seq_len: {a.seq}
per_device_train_batch_size: {a.batch}
gradient_accumulation_steps: 1
learning_rate: {a.lr}
lr_scheduler_type: constant
weight_decay: 0.0
adam_beta1: 0.9
adam_beta2: 0.999
adam_epsilon: 1.0e-8
max_grad_norm: 1.0
max_steps: {a.steps}
save_interval: 0
eval_interval: 0
steps_per_print: 1
seed: 7
samples: {{tokens: 0}}
device: {a.device}
""")
    with open(os.path.join(a.dir, "ds_fp16.json"), "w") as f:
        json.dump({"fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": a.scale_power,
                            "loss_scale_window": 1000, "hysteresis": 1, "min_loss_scale": 1}}, f, indent=2)
    with open(os.path.join(a.dir, "params.json"), "w") as f:
        json.dump(vars(a), f, indent=2)
    print(f"fp16_parity: prepared {a.dir}: {a.preset}, {need} tokens = one batch of {a.batch} x {a.seq}")


def run_torch(a):
    import numpy as np
    import torch
    import torch.nn.functional as F
    from transformers import GPT2LMHeadModel

    with open(os.path.join(a.dir, "params.json")) as f:
        p = json.load(f)
    dev = p["device"]
    B, T = p["batch"], p["seq"]
    ids = torch.from_numpy(np.fromfile(os.path.join(a.dir, "train.bin"), dtype=np.uint16).astype(np.int64))
    x = torch.stack([ids[i * T:i * T + T] for i in range(B)]).to(dev)
    y = torch.stack([ids[i * T + 1:i * T + T + 1] for i in range(B)]).to(dev)
    attn = os.environ.get("ZT_TORCH_ATTN", "sdpa")
    model = GPT2LMHeadModel.from_pretrained(os.path.join(a.dir, "init"), attn_implementation=attn).to(dev)
    model.train()
    params = [q for q in model.parameters() if q.requires_grad]
    opt = torch.optim.AdamW(params, lr=p["lr"], betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    amp = dev == "cuda"  # CPU machines check the script in f32 (no fp16 autocast there)
    kw = dict(init_scale=2.0 ** p["scale_power"], growth_factor=2.0, backoff_factor=0.5, growth_interval=1000,
              enabled=amp)
    # torch.amp.GradScaler from PyTorch 2.3 on; torch.cuda.amp's before (CPU checks with 1.13).
    scaler = torch.amp.GradScaler(dev, **kw) if hasattr(torch.amp, "GradScaler") else torch.cuda.amp.GradScaler(**kw)
    out = []
    for step in range(1, p["steps"] + 1):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=dev, dtype=torch.float16) if amp else contextlib.nullcontext():
            logits = model(input_ids=x).logits
        # f32 softmax over the 16-bit logits, as zerotrain's fused LM head + CE does.
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1))
        scale = scaler.get_scale() if amp else 1.0
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        scaler.step(opt)
        scaler.update()
        skipped = amp and scaler.get_scale() < scale
        out.append({"step": step, "loss": loss.item(), "loss_scale": scale, "skipped": bool(skipped),
                    "grad_norm": None if skipped or not math.isfinite(norm.item()) else norm.item()})
        print(f"torch step {step:3d} | loss {loss.item():.4f} | scale {scale:g}" + (" | skipped" if skipped else ""),
              flush=True)
    with open(os.path.join(a.dir, "torch_fp16.jsonl"), "w") as f:
        for r in out:
            f.write(json.dumps(r) + "\n")


def records(path):
    rows = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if "loss" in r and "val_loss" not in r:
                rows[int(r["step"])] = r
    return rows


def compare(a):
    with open(os.path.join(a.dir, "params.json")) as f:
        p = json.load(f)
    zt = records(os.path.join(a.dir, "zt_fp16", "metrics.jsonl"))
    th = records(os.path.join(a.dir, "torch_fp16.jsonl"))
    bf_path = os.path.join(a.dir, "zt_bf16", "metrics.jsonl")
    bf = records(bf_path) if os.path.exists(bf_path) else {}
    steps = list(range(1, p["steps"] + 1))
    missing = [s for s in steps if s not in zt or s not in th]
    if missing:
        print(f"fp16_parity: steps missing from a run: {missing[:10]}")
        return 1

    def rel(u, v):
        return abs(u - v) / abs(v)

    print(f"{'step':>4} {'zt fp16':>9} {'torch fp16':>10} {'rel':>8} {'zt bf16':>9} {'zt scale':>9} "
          f"{'torch scale':>11} {'zt skip':>7} {'th skip':>7}")
    for s in steps:
        z, t = zt[s], th[s]
        if s <= 3 or s % 5 == 0 or z["skipped"] or t["skipped"] or s == steps[-1]:
            b = f"{bf[s]['loss']:9.4f}" if s in bf else f"{'-':>9}"
            print(f"{s:4d} {z['loss']:9.4f} {t['loss']:10.4f} {rel(z['loss'], t['loss']):8.1e} {b} "
                  f"{z['loss_scale']:9g} {t['loss_scale']:11g} {str(z['skipped']):>7} {str(t['skipped']):>7}")
    zt_skips = [s for s in steps if zt[s]["skipped"]]
    th_skips = [s for s in steps if th[s]["skipped"]]
    same_scales = all(zt[s]["loss_scale"] == th[s]["loss_scale"] for s in steps)
    first = rel(zt[1]["loss"], th[1]["loss"])
    worst = max(rel(zt[s]["loss"], th[s]["loss"]) for s in steps)
    worst_bf = max((rel(zt[s]["loss"], bf[s]["loss"]) for s in steps if s in bf), default=float("nan"))
    print(f"skipped steps: zerotrain {zt_skips}, torch {th_skips}; loss scales equal at every step: {same_scales}")
    print(f"loss rel diff zerotrain fp16 vs torch AMP: step 1 {first:.2e}, max over {len(steps)} steps {worst:.2e} "
          f"(tolerance {a.tol:g}); zerotrain fp16 vs bf16: max {worst_bf:.2e}")
    ok = zt_skips == th_skips and same_scales and first <= 2e-3 and worst <= a.tol
    print("fp16_parity: " + ("PASS" if ok else "FAIL"))
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["prepare", "torch", "compare"])
    ap.add_argument("dir")
    ap.add_argument("--preset", default="gpt2", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--scale-power", dest="scale_power", type=int, default=24)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tol", type=float, default=2e-2, help="max rel loss diff, zerotrain fp16 vs torch AMP")
    a = ap.parse_args()
    a.dir = os.path.abspath(a.dir)
    if a.what == "prepare":
        prepare(a)
    elif a.what == "torch":
        run_torch(a)
    else:
        sys.exit(compare(a))


if __name__ == "__main__":
    main()
