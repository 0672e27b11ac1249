#!/usr/bin/env python3
"""PyTorch oracle for zerotrain's generation and evaluation, on tools/torch_reference.py's
float64 HF-semantics models (GPT-2 and the Llama family).

Greedy generation (no KV cache: the whole sequence is recomputed each step, so the
oracle shares no caching logic with the engine under test):

  torch_generate.py --config config.json --weights model.safetensors \
      --generate --prompt-ids 1,2,3 --max-new-tokens N --out out.json
  out.json: {"tokens": [...new ids...], "margins": [top-1 minus top-2 logit per step]}

Evaluation, windowed exactly as `zerotrain eval` documents it (each document on its
own; inputs doc[s:s+T], targets doc[s+1:s+T+1] for s = 0, T, 2T, ...):

  torch_generate.py --config config.json --weights model.safetensors \
      --eval docs.json --seq-len T --out out.json
  docs.json: [[ids of document 1], [ids of document 2], ...]
  out.json: {"loss_sum": nats, "tokens": predicted tokens, "mean_loss": loss_sum / tokens}

Exit codes: 0 ok, 2 bad input, 3 torch is missing.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

try:
    import torch
    import torch.nn.functional as F
except ImportError as e:
    print(f"torch_generate.py: PyTorch is not available ({e})", file=sys.stderr)
    sys.exit(3)

import torch_reference as ref  # noqa: E402


def forward(cfg, params, tokens):
    fn = ref.gpt2_forward if cfg.family == "gpt2" else ref.llama_forward
    return fn(cfg, params, tokens)


def greedy(cfg, params, prompt, n):
    ids = list(prompt)
    out, margins = [], []
    for _ in range(n):
        if len(ids) > cfg.max_positions:
            raise ValueError("the sequence outgrew max_position_embeddings; generate fewer tokens")
        logits = forward(cfg, params, torch.tensor([ids]))[0, -1]
        top = torch.topk(logits, 2)
        nxt = int(top.indices[0])
        margins.append(float(top.values[0] - top.values[1]))
        out.append(nxt)
        ids.append(nxt)
    return {"tokens": out, "margins": margins}


def evaluate(cfg, params, docs, T):
    loss_sum, count = 0.0, 0
    for doc in docs:
        for s in range(0, len(doc) - 1, T):
            inp = doc[s:s + T]
            tgt = doc[s + 1:s + T + 1]
            inp = inp[:len(tgt)]
            logits = forward(cfg, params, torch.tensor([inp]))[0]
            loss_sum += float(F.cross_entropy(logits, torch.tensor(tgt), reduction="sum"))
            count += len(tgt)
    if count == 0:
        raise ValueError("no document has two tokens")
    return {"loss_sum": loss_sum, "tokens": count, "mean_loss": loss_sum / count}


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True)
    ap.add_argument("--weights", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    ap.add_argument("--generate", action="store_true")
    ap.add_argument("--prompt-ids", default="")
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--eval", metavar="DOCS_JSON")
    ap.add_argument("--seq-len", type=int, default=0)
    args = ap.parse_args(argv)
    if args.generate == bool(args.eval):
        ap.error("give exactly one of --generate and --eval")
    try:
        dtype = {"float64": torch.float64, "float32": torch.float32}[args.dtype]
        with open(args.config) as f:
            cfg = ref.Config(json.load(f))
        params = ref.load_params(cfg, args.weights, dtype)
        with torch.no_grad():
            if args.generate:
                prompt = [int(x) for x in args.prompt_ids.split(",") if x.strip()]
                if not prompt:
                    raise ValueError("--prompt-ids is empty")
                result = greedy(cfg, params, prompt, args.max_new_tokens)
            else:
                with open(args.eval) as f:
                    docs = json.load(f)
                T = args.seq_len or cfg.max_positions
                result = evaluate(cfg, params, docs, T)
    except (ValueError, KeyError, OSError) as e:
        print(f"torch_generate.py: error: {e}", file=sys.stderr)
        return 2
    with open(args.out, "w") as f:
        json.dump(result, f)
    print(f"torch_generate: {cfg.model_type} " + ("generate" if args.generate else "eval") + f" -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
