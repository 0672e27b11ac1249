#!/usr/bin/env python3
"""PyTorch reference (oracle) for zerotrain's GPT-2 and Llama-family models.

Plain PyTorch (>= 1.13, no `transformers` needed) with exactly the semantics of HF
transformers' GPT2LMHeadModel and LlamaForCausalLM (and Mistral / Qwen2, which share its
structure):

  GPT-2: learned positions, pre-LN blocks, Conv1D weights stored [in, out], gelu_new
         (tanh), causal softmax attention scaled by 1/sqrt(head_dim), final LayerNorm,
         head tied to wte unless tie_word_embeddings is false.
  Llama: RMSNorm (x * rsqrt(mean(x^2) + eps) * weight), rotate_half RoPE with rope_theta
         and "linear" / "llama3" rope_scaling computing inv_freq exactly as transformers
         does (in float32), SwiGLU MLP, GQA through repeat_kv, optional q/k/v(/o) biases
         (Llama attention_bias, Qwen2's q/k/v bias), optional mlp_bias, tied or untied head.

Dropout is not applied (eval semantics). The loss is HF's: the mean cross-entropy over
targets != -100. Targets are given already aligned with the tokens (target[t] is the
token after tokens[t]), so no shift happens here.

Usage:
  torch_reference.py --config config.json --weights model.safetensors \
      --batch batch.safetensors --out out.safetensors [--dtype float64|float32]

  config.json        HF config (transformers 4.x or 5.x spelling)
  model.safetensors  HF names and layouts (GPT-2 Conv1D [in, out]; no vocab padding)
  batch.safetensors  "tokens" and "targets", integer [B, T] (targets may hold -100)
  out.safetensors    "logits" [B, T, V], "loss" [] and "grad.<hf name>" for every
                     parameter, in the HF name and layout, in --dtype (default float64)
  --also-float32 P   also run in float32 and write that to P (the rounding error any
                     float32 implementation can be expected to show)

  torch_reference.py --self-test     checks the float32 run against the float64 one
                                     for tiny GPT-2 and Llama configs

Exit codes: 0 ok, 2 bad input, 3 torch is missing.
"""
import argparse
import json
import math
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:  # the C++ test skips on exit code 3
    print(f"torch_reference.py: PyTorch is not available ({e})", file=sys.stderr)
    sys.exit(3)

import st  # noqa: E402  (tools/st.py, pure-python safetensors)


# ---- config ----------------------------------------------------------------------

class Config:
    def __init__(self, j):
        self.model_type = j.get("model_type")
        if self.model_type == "gpt2":
            self.family = "gpt2"
            self.vocab_size = j.get("vocab_size", 50257)
            self.hidden_size = j.get("n_embd", 768)
            self.num_layers = j.get("n_layer", 12)
            self.num_heads = j.get("n_head", 12)
            self.num_kv_heads = self.num_heads
            self.head_dim = self.hidden_size // self.num_heads
            self.intermediate_size = j.get("n_inner") or 4 * self.hidden_size
            self.max_positions = j.get("n_positions", 1024)
            self.eps = j.get("layer_norm_epsilon", 1e-5)
            self.tie = j.get("tie_word_embeddings", True)
            act = j.get("activation_function", "gelu_new")
            if act not in ("gelu_new", "gelu_pytorch_tanh"):
                raise ValueError(f"activation_function {act} not supported")
            if j.get("scale_attn_by_inverse_layer_idx") or j.get("reorder_and_upcast_attn") \
                    or not j.get("scale_attn_weights", True):
                raise ValueError("non-default GPT-2 attention scaling options are not supported")
            self.qkv_bias = self.o_bias = self.mlp_bias = True
        elif self.model_type in ("llama", "mistral", "qwen2"):
            self.family = "llama"
            self.vocab_size = j["vocab_size"]
            self.hidden_size = j["hidden_size"]
            self.intermediate_size = j["intermediate_size"]
            self.num_layers = j["num_hidden_layers"]
            self.num_heads = j["num_attention_heads"]
            self.num_kv_heads = j.get("num_key_value_heads") or self.num_heads
            self.head_dim = j.get("head_dim") or self.hidden_size // self.num_heads
            self.max_positions = j.get("max_position_embeddings", 2048)
            self.eps = j.get("rms_norm_eps", 1e-6)
            self.tie = j.get("tie_word_embeddings", False)
            if j.get("hidden_act", "silu") != "silu":
                raise ValueError(f"hidden_act {j.get('hidden_act')} not supported")
            if self.model_type == "qwen2":
                self.qkv_bias, self.o_bias, self.mlp_bias = True, False, False
            else:
                self.qkv_bias = self.o_bias = bool(j.get("attention_bias", False))
                self.mlp_bias = bool(j.get("mlp_bias", False))
            rp = j.get("rope_parameters")
            if isinstance(rp, dict):  # transformers 5.x
                self.rope_theta = rp.get("rope_theta", j.get("rope_theta", 10000.0))
                self.rope_scaling = rp
            else:
                self.rope_theta = j.get("rope_theta", 10000.0)
                self.rope_scaling = j.get("rope_scaling")
        else:
            raise ValueError(f"model_type {self.model_type!r} not supported")

    def param_shapes(self):
        """HF parameter names -> shapes (file layout), in HF module order."""
        C, V, F_ = self.hidden_size, self.vocab_size, self.intermediate_size
        s = {}
        if self.family == "gpt2":
            s["transformer.wte.weight"] = [V, C]
            s["transformer.wpe.weight"] = [self.max_positions, C]
            for i in range(self.num_layers):
                p = f"transformer.h.{i}."
                s[p + "ln_1.weight"] = [C]
                s[p + "ln_1.bias"] = [C]
                s[p + "attn.c_attn.weight"] = [C, 3 * C]
                s[p + "attn.c_attn.bias"] = [3 * C]
                s[p + "attn.c_proj.weight"] = [C, C]
                s[p + "attn.c_proj.bias"] = [C]
                s[p + "ln_2.weight"] = [C]
                s[p + "ln_2.bias"] = [C]
                s[p + "mlp.c_fc.weight"] = [C, F_]
                s[p + "mlp.c_fc.bias"] = [F_]
                s[p + "mlp.c_proj.weight"] = [F_, C]
                s[p + "mlp.c_proj.bias"] = [C]
            s["transformer.ln_f.weight"] = [C]
            s["transformer.ln_f.bias"] = [C]
        else:
            Hq, Hkv, D = self.num_heads, self.num_kv_heads, self.head_dim
            s["model.embed_tokens.weight"] = [V, C]
            for i in range(self.num_layers):
                p = f"model.layers.{i}."
                s[p + "input_layernorm.weight"] = [C]
                for proj, rows in (("q_proj", Hq * D), ("k_proj", Hkv * D), ("v_proj", Hkv * D)):
                    s[p + f"self_attn.{proj}.weight"] = [rows, C]
                    if self.qkv_bias:
                        s[p + f"self_attn.{proj}.bias"] = [rows]
                s[p + "self_attn.o_proj.weight"] = [C, Hq * D]
                if self.o_bias:
                    s[p + "self_attn.o_proj.bias"] = [C]
                s[p + "post_attention_layernorm.weight"] = [C]
                for proj, shape in (("gate_proj", [F_, C]), ("up_proj", [F_, C]), ("down_proj", [C, F_])):
                    s[p + f"mlp.{proj}.weight"] = shape
                    if self.mlp_bias:
                        s[p + f"mlp.{proj}.bias"] = [shape[0]]
            s["model.norm.weight"] = [C]
        if not self.tie:
            s["lm_head.weight"] = [V, C]
        return s


# ---- weights -----------------------------------------------------------------------

def load_params(cfg, path, dtype):
    tensors, _ = st.load_file(path)
    shapes = cfg.param_shapes()
    params = {}
    missing = []
    for name, shape in shapes.items():
        t = tensors.get(name)
        if t is None and cfg.family == "gpt2" and name.startswith("transformer."):
            t = tensors.get(name[len("transformer."):])  # original gpt2 hub names
        if t is None:
            missing.append(name)
            continue
        if list(t.shape) != shape:
            raise ValueError(f"{path}: {name} has shape {list(t.shape)}, expected {shape}")
        params[name] = t.to(dtype).clone().requires_grad_(True)
    if missing:
        raise ValueError(f"{path}: missing tensors: {', '.join(missing)}")
    return params


# ---- GPT-2 -------------------------------------------------------------------------

def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def causal_softmax_attention(q, k, v, scale):
    # q [B, H, T, D], k/v [B, H, T, D]. HF masks with the dtype's most negative value.
    T = q.shape[-2]
    att = torch.matmul(q, k.transpose(-1, -2)) * scale
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    att = torch.where(mask, att, torch.tensor(torch.finfo(att.dtype).min, dtype=att.dtype))
    att = torch.softmax(att, dim=-1)
    return torch.matmul(att, v)


def gpt2_forward(cfg, P, tokens):
    B, T = tokens.shape
    C, H = cfg.hidden_size, cfg.num_heads
    D = C // H
    pos = torch.arange(T)
    h = P["transformer.wte.weight"][tokens] + P["transformer.wpe.weight"][pos][None]
    for i in range(cfg.num_layers):
        p = f"transformer.h.{i}."
        a = F.layer_norm(h, (C,), P[p + "ln_1.weight"], P[p + "ln_1.bias"], cfg.eps)
        qkv = torch.addmm(P[p + "attn.c_attn.bias"], a.reshape(-1, C), P[p + "attn.c_attn.weight"])
        q, k, v = qkv.view(B, T, 3 * C).split(C, dim=2)
        q, k, v = (t.reshape(B, T, H, D).transpose(1, 2) for t in (q, k, v))
        y = causal_softmax_attention(q, k, v, 1.0 / (D ** 0.5))
        y = y.transpose(1, 2).reshape(B * T, C)
        y = torch.addmm(P[p + "attn.c_proj.bias"], y, P[p + "attn.c_proj.weight"])
        h = h + y.view(B, T, C)
        m = F.layer_norm(h, (C,), P[p + "ln_2.weight"], P[p + "ln_2.bias"], cfg.eps)
        m = gelu_new(torch.addmm(P[p + "mlp.c_fc.bias"], m.reshape(-1, C), P[p + "mlp.c_fc.weight"]))
        m = torch.addmm(P[p + "mlp.c_proj.bias"], m, P[p + "mlp.c_proj.weight"])
        h = h + m.view(B, T, C)
    h = F.layer_norm(h, (C,), P["transformer.ln_f.weight"], P["transformer.ln_f.bias"], cfg.eps)
    head = P["transformer.wte.weight"] if cfg.tie else P["lm_head.weight"]
    return h @ head.t()


# ---- Llama -------------------------------------------------------------------------

def rope_inv_freq(cfg):
    """inv_freq as transformers computes it (float32), with linear / llama3 scaling."""
    dim, base = cfg.head_dim, cfg.rope_theta
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    s = cfg.rope_scaling
    rope_type = (s or {}).get("rope_type", (s or {}).get("type", "default"))
    if rope_type == "default":
        return inv_freq
    if rope_type == "linear":
        return inv_freq / s["factor"]
    if rope_type == "llama3":
        factor = s["factor"]
        low_freq_factor = s["low_freq_factor"]
        high_freq_factor = s["high_freq_factor"]
        old_context_len = s["original_max_position_embeddings"]
        low_freq_wavelen = old_context_len / low_freq_factor
        high_freq_wavelen = old_context_len / high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
        smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
        smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
        is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
        return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)
    raise ValueError(f"rope_type {rope_type} not supported")


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(x, n_rep):
    b, h, t, d = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(b, h, n_rep, t, d).reshape(b, h * n_rep, t, d)


def rms_norm(x, weight, eps):
    # HF: weight * (x.float() * rsqrt(mean(x^2) + eps)).to(input_dtype); "float" is at least
    # float32 here, float64 when the reference runs in float64.
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf = x.to(compute)
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def linear(P, name, x):
    w = P[name + ".weight"]
    b = P.get(name + ".bias")
    return F.linear(x, w, b)


def llama_forward(cfg, P, tokens):
    B, T = tokens.shape
    C, Hq, Hkv, D = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    dtype = P["model.embed_tokens.weight"].dtype
    # As transformers: angles = inv_freq * position as one float32 product (part of the
    # model's definition); their cos/sin are then taken in float64 (HF: float32).
    inv_freq = rope_inv_freq(cfg)
    freqs = torch.arange(T, dtype=torch.float32)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1).double()
    cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)
    h = P["model.embed_tokens.weight"][tokens]
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        x = rms_norm(h, P[p + "input_layernorm.weight"], cfg.eps)
        q = linear(P, p + "self_attn.q_proj", x).view(B, T, Hq, D).transpose(1, 2)
        k = linear(P, p + "self_attn.k_proj", x).view(B, T, Hkv, D).transpose(1, 2)
        v = linear(P, p + "self_attn.v_proj", x).view(B, T, Hkv, D).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k, v = repeat_kv(k, Hq // Hkv), repeat_kv(v, Hq // Hkv)
        y = causal_softmax_attention(q, k, v, D ** -0.5)
        y = y.transpose(1, 2).reshape(B, T, Hq * D)
        h = h + linear(P, p + "self_attn.o_proj", y)
        x = rms_norm(h, P[p + "post_attention_layernorm.weight"], cfg.eps)
        g = linear(P, p + "mlp.gate_proj", x)
        u = linear(P, p + "mlp.up_proj", x)
        h = h + linear(P, p + "mlp.down_proj", F.silu(g) * u)
    h = rms_norm(h, P["model.norm.weight"], cfg.eps)
    head = P["model.embed_tokens.weight"] if cfg.tie else P["lm_head.weight"]
    return h @ head.t()


# ---- driver ------------------------------------------------------------------------

def run(cfg, params, tokens, targets):
    """Returns (logits, loss, {name: grad})."""
    forward = gpt2_forward if cfg.family == "gpt2" else llama_forward
    logits = forward(cfg, params, tokens)
    V = logits.shape[-1]
    loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=-100, reduction="mean")
    loss.backward()
    grads = {}
    for name, p in params.items():
        grads[name] = p.grad if p.grad is not None else torch.zeros_like(p)
    return logits.detach(), loss.detach(), grads


def main_run(args):
    dtype = {"float64": torch.float64, "float32": torch.float32}[args.dtype]
    with open(args.config) as f:
        cfg = Config(json.load(f))
    params = load_params(cfg, args.weights, dtype)
    batch, _ = st.load_file(args.batch)
    tokens = batch["tokens"].long()
    targets = batch["targets"].long()
    if tokens.dim() != 2 or tokens.shape != targets.shape:
        raise ValueError("tokens and targets must be [B, T] of the same shape")
    if tokens.shape[1] > cfg.max_positions:
        raise ValueError("sequence longer than max_position_embeddings")
    if int((targets != -100).sum()) == 0:
        raise ValueError("every target is ignored: the mean loss is undefined")
    runs = [(args.out, dtype, args.dtype)]
    if args.also_float32:  # the same run in float32: the error an f32 implementation is expected to have
        runs.append((args.also_float32, torch.float32, "float32"))
    for path, dt, dt_name in runs:
        params = load_params(cfg, args.weights, dt) if dt != dtype else params
        logits, loss, grads = run(cfg, params, tokens, targets)
        out = {"logits": logits.to(dt), "loss": loss.to(dt).reshape([])}
        for name, g in grads.items():
            out["grad." + name] = g.to(dt)
        st.save_file(out, path, metadata={"format": "pt", "dtype": dt_name})
        print(f"torch_reference: {cfg.model_type} {dt_name} loss {loss.item():.10f} "
              f"({int((targets != -100).sum())} targets, {len(grads)} parameters)")
    return 0


def _rel_err(a, b):
    """max |a - b| / max |b|: the error relative to the tensor's scale."""
    a, b = a.double(), b.double()
    return ((a - b).abs().max() / b.abs().max().clamp(min=1e-30)).item()


def self_test():
    torch.manual_seed(0)
    configs = {
        "gpt2": {"model_type": "gpt2", "vocab_size": 97, "n_embd": 32, "n_layer": 2, "n_head": 4,
                 "n_positions": 16, "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True},
        "llama": {"model_type": "llama", "vocab_size": 97, "hidden_size": 32, "intermediate_size": 40,
                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                  "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False,
                  "max_position_embeddings": 64,
                  "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                   "high_freq_factor": 4.0, "original_max_position_embeddings": 32}},
        "qwen2": {"model_type": "qwen2", "vocab_size": 97, "hidden_size": 32, "intermediate_size": 40,
                  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1,
                  "head_dim": 16, "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
                  "max_position_embeddings": 64},
    }
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for label, j in configs.items():
            cfg = Config(j)
            weights = {n: torch.randn(s) * 0.2 + (1.0 if n.endswith("norm.weight") or ".ln_" in n and
                                                      n.endswith("weight") else 0.0)
                       for n, s in cfg.param_shapes().items()}
            wpath = os.path.join(tmp, f"{label}.safetensors")
            st.save_file(weights, wpath, metadata={"format": "pt"})
            tokens = torch.randint(0, cfg.vocab_size, (2, 12))
            targets = torch.randint(0, cfg.vocab_size, (2, 12))
            targets[0, 3] = targets[1, 0] = -100
            res = {}
            for dt in (torch.float64, torch.float32):
                res[dt] = run(cfg, load_params(cfg, wpath, dt), tokens, targets)
            l64, l32 = res[torch.float64][1].item(), res[torch.float32][1].item()
            errs = {"loss": abs(l32 - l64) / abs(l64), "logits": _rel_err(res[torch.float32][0], res[torch.float64][0])}
            errs["grads"] = max(_rel_err(res[torch.float32][2][n], res[torch.float64][2][n])
                                for n in res[torch.float64][2])
            good = errs["loss"] < 1e-6 and errs["logits"] < 1e-5 and errs["grads"] < 1e-4
            ok &= good
            print(f"self-test {label}: loss {l64:.6f}, f32 vs f64 max rel err: " +
                  ", ".join(f"{k} {v:.2e}" for k, v in errs.items()) + ("" if good else "  FAIL"))
    return 0 if ok else 1


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config")
    ap.add_argument("--weights")
    ap.add_argument("--batch")
    ap.add_argument("--out")
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    ap.add_argument("--also-float32", metavar="PATH", help="also write the float32 run's results here")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.self_test:
        return self_test()
    if not (args.config and args.weights and args.batch and args.out):
        ap.error("--config, --weights, --batch and --out are required (or --self-test)")
    try:
        return main_run(args)
    except (ValueError, KeyError, OSError) as e:
        print(f"torch_reference.py: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
