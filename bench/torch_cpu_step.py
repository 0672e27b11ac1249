"""The same training step as bench/cpu_train_step.cpp in PyTorch on CPU (eager, f32):
GPT-2 (HF GPT2LMHeadModel semantics: pre-LN, learned positions, tied head, gelu tanh),
AdamW (foreach). Prints tokens/s. Used by bench/cpu_vs_torch.sh."""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.H = H
        self.ln_1 = nn.LayerNorm(C)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x, mask):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q = q.view(B, T, self.H, C // self.H).transpose(1, 2)
        k = k.view(B, T, self.H, C // self.H).transpose(1, 2)
        v = v.view(B, T, self.H, C // self.H).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.H))
        att = att.masked_fill(mask[:T, :T] == 0, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.c_proj(y)
        x = x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
        return x


class GPT(nn.Module):
    def __init__(self, L, C, H, V, T):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(max(T, 1024), C)
        self.h = nn.ModuleList([Block(C, H) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)
        self.register_buffer("mask", torch.tril(torch.ones(T, T)))
        for name, p in self.named_parameters():  # HF GPT-2 init: N(0, 0.02), zero biases, unit LN gains
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for block in self.h:
            x = block(x, self.mask)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--width", type=int, default=384)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    a = p.parse_args()
    torch.manual_seed(0)
    model = GPT(a.layers, a.width, a.heads, a.vocab, a.seq)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, foreach=True)
    idx = torch.randint(0, a.vocab, (a.batch, a.seq))
    tgt = torch.randint(0, a.vocab, (a.batch, a.seq))
    times = []
    for s in range(a.warmup + a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(idx, tgt)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if s >= a.warmup:
            times.append(dt)
    times.sort()
    med = times[len(times) // 2]
    print(f"pytorch {torch.__version__}: {torch.get_num_threads()} threads, step {med:.3f} s (median of {len(times)}), "
          f"{a.batch * a.seq / med:.0f} tokens/s, loss {loss.item():.4f}")
    print(f"RESULT tokens_per_s={a.batch * a.seq / med:.1f}")


if __name__ == "__main__":
    main()
