"""The PyTorch baseline for bench/gpu_train_step.cpp on the GPU: HF transformers'
GPT2LMHeadModel / LlamaForCausalLM built from a config (random init), fused AdamW, SDPA
attention, random tokens; torch.compile (the main baseline) and eager.
  compile, eager          bf16 parameters and bf16 AdamW moments (pure bf16, no master
                          weights: 8 bytes of model state per parameter)
  compile-amp, eager-amp  f32 parameters, gradients and moments, forward under
                          torch.autocast(bfloat16): HF Trainer's bf16=True / Accelerate's
                          mixed_precision bf16 (16 bytes per parameter, like zerotrain's f32
                          master weights + f32 moments next to bf16 weights and gradients)
Prints tokens/s, MFU against a bf16 GEMM measured here, and peak memory.
  python3 bench/torch_gpu_step.py --preset gpt2 --batch 16 --seq 1024 --steps 20 --mode compile"""
import argparse
import os
import time

import torch

# SDPA (the fast path on the GPU); ZT_TORCH_ATTN=eager for transformers versions without it
# for GPT-2 (tests of the scripts on CPU machines).
ATTENTION = os.environ.get("ZT_TORCH_ATTN", "sdpa")

PRESETS = {
    # zerotrain's tiny presets, for tests of the scripts on CPU machines.
    "tiny-gpt2": dict(family="gpt2", n_layer=4, n_head=4, n_embd=128, vocab=512),
    "tiny-llama": dict(family="llama", layers=4, hidden=128, heads=4, kv=2, ffn=344, vocab=512),
    "gpt2": dict(family="gpt2", n_layer=12, n_head=12, n_embd=768, vocab=50257),
    "gpt2-xl": dict(family="gpt2", n_layer=48, n_head=25, n_embd=1600, vocab=50257),
    "llama-3.2-1b": dict(family="llama", layers=16, hidden=2048, heads=32, kv=8, ffn=8192, vocab=128256),
}


def build(preset, seq):
    p = PRESETS[preset]
    if p["family"] == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel
        cfg = GPT2Config(n_layer=p["n_layer"], n_head=p["n_head"], n_embd=p["n_embd"], vocab_size=p["vocab"],
                         n_positions=max(1024, seq), resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                         attn_implementation=ATTENTION)
        model = GPT2LMHeadModel(cfg)
        flops_per_token = 6 * sum(x.numel() for x in model.parameters()) + 12 * p["n_layer"] * p["n_embd"] * seq
    else:
        from transformers import LlamaConfig, LlamaForCausalLM
        cfg = LlamaConfig(num_hidden_layers=p["layers"], hidden_size=p["hidden"], num_attention_heads=p["heads"],
                          num_key_value_heads=p["kv"], intermediate_size=p["ffn"], vocab_size=p["vocab"],
                          tie_word_embeddings=True, max_position_embeddings=max(2048, seq),
                          attn_implementation=ATTENTION)
        model = LlamaForCausalLM(cfg)
        flops_per_token = 6 * sum(x.numel() for x in model.parameters()) + 12 * p["layers"] * p["hidden"] * seq
    return model, flops_per_token, p["vocab"]


def gemm_peak():
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    reps = 20
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    torch.cuda.synchronize()
    return 2 * n ** 3 * reps / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="gpt2", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--mode", default="compile", choices=["compile", "eager", "compile-amp", "eager-amp"])
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    peak = gemm_peak()
    model, flops_per_token, vocab = build(a.preset, a.seq)
    amp = a.mode.endswith("-amp")
    model = model.to(device="cuda", dtype=torch.float32 if amp else torch.bfloat16).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=True)
    tok = torch.randint(0, vocab, (a.batch, a.seq), device="cuda")
    fwd = torch.compile(model) if a.mode.startswith("compile") else model

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            loss = fwd(input_ids=tok, labels=tok).loss
        loss.backward()
        opt.step()
        return loss

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    tps = a.batch * a.seq * a.steps / secs
    mem = torch.cuda.max_memory_allocated() / 2 ** 30
    print(f"torch-{a.mode} {a.preset} B={a.batch} T={a.seq}: {tps:.0f} tokens/s, {1000 * secs / a.steps:.1f} ms/step, "
          f"MFU {100 * tps * flops_per_token / peak:.1f}% of measured bf16 GEMM {peak / 1e12:.0f} TFLOP/s, "
          f"peak memory {mem:.2f} GiB, loss {loss.item():.4f}")
    print(f"RESULT torch-{a.mode} tokens_per_s={tps:.0f} peak_gib={mem:.3f} gemm_tflops={peak / 1e12:.1f}")


if __name__ == "__main__":
    main()
