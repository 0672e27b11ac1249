#!/usr/bin/env python3
"""Do zerotrain's trained outputs load in transformers as they are? (issue 19 item 1; run on
the GPU machine, whose python3 has torch and transformers 5.x; everything runs on the CPU)

    python3 tools/hf_load_check.py BUILD/zerotrain [--work DIR] [--only gpt2,llama,...]
                                   [--atol 1e-5] [--skip-hf]

Trains tiny models for a few steps with `zerotrain train --device cpu` (one per case), then
for each final/ loads AutoTokenizer and AutoModelForCausalLM (float32) from the directory as
it is and checks
  - the token ids of a few texts: AutoTokenizer's (add_special_tokens True and False) equal
    `zerotrain tokenizer encode` (--special and without), every id inside the vocabulary;
  - the logits: transformers' forward over our ids equals the f32 logits `zerotrain eval
    --dump-logits` wrote, max |diff| <= atol * max(1, max |logit|) at every position.
Cases:
  gpt2     a 2-layer GPT-2 from a config.json with GPT-2's 50257-token vocabulary
           (tests/data/gpt2 vocab.json + merges.txt: GPT2Tokenizer)
  llama    the tiny-llama preset with the byte-level BPE zerotrain trains on the data
           (tokenizer.json: PreTrainedTokenizerFast)
  qwen2    tests/data/hf/qwen2 fine-tuned with a tokenizer.json from `zerotrain tokenizer train`
  llama2   the tiny-llama preset with tests/data/hf/llama2_tokenizer.model (SentencePiece:
           LlamaTokenizer)
  llama2hf tests/data/hf/llama2 fine-tuned: its own tokenizer_config.json carried over
Prints one line per case and exits 1 when any case differs (0 when all agree). --skip-hf
runs only the zerotrain half (training, ids, logits files): for machines without
transformers.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # see zt_check_common's docstring
from zt_check_common import (CHECK_TEXTS, ROOT, causal_lm_f32, chosen_cases, dump_logits, empty_dir, logits_diff,
                             parser, q, run, run_cases, train, train_tokenizer)

TEXTS = CHECK_TEXTS + ["caf\u00e9 na\u00efve \u65e5\u672c\u8a9e"]
GPT2_CONFIG = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 2, "n_head": 2, "n_embd": 64,
               "n_positions": 128, "vocab_size": 50257}  # bos/eos: GPT2Config's defaults (50256)


def train_model(zt, work, name, model_yaml):
    """3 steps of full fine-tuning: final/ holds trained weights, not the init ones; returns final/."""
    return train(zt, work, name, model_yaml, 3, "1.0e-3")


def cases(zt, work):
    """name -> a function that trains and returns the final/ directory."""
    def gpt2():
        cfg = os.path.join(work, "gpt2_config.json")
        with open(cfg, "w") as f:
            json.dump(GPT2_CONFIG, f)
        return train_model(zt, work, "gpt2", "{config: %s, tokenizer: %s}" % (
            q(cfg), q(os.path.join(ROOT, "tests/data/gpt2/vocab.json"))))

    def llama():
        return train_model(zt, work, "llama", "{preset: tiny-llama}")

    def qwen2():
        tok = train_tokenizer(zt, work, "qwen2", 320)
        return train_model(zt, work, "qwen2", "{path: %s, tokenizer: %s}" % (q(os.path.join(ROOT, "tests/data/hf/qwen2")), q(tok)))

    def llama2():
        return train_model(zt, work, "llama2", "{preset: tiny-llama, tokenizer: %s}" % q(
            os.path.join(ROOT, "tests/data/hf/llama2_tokenizer.model")))

    def llama2hf():
        return train_model(zt, work, "llama2hf", "{path: %s}" % q(os.path.join(ROOT, "tests/data/hf/llama2")))

    return {"gpt2": gpt2, "llama": llama, "qwen2": qwen2, "llama2": llama2, "llama2hf": llama2hf}


def our_ids(zt, final, text, special):
    out = run([zt, "tokenizer", "encode", "--tokenizer", final, "--text", text] + (["--special"] if special else []))
    return [int(x) for x in out.split()]


def check_hf(final, ours_special, ours_plain, dumped, atol):
    """Problems found (empty: transformers agrees), and a summary. dumped: dump_logits' (ids,
    logits) per text of TEXTS."""
    import torch
    from transformers import AutoTokenizer

    problems = []
    tok = AutoTokenizer.from_pretrained(final)
    model = causal_lm_f32(final)
    vocab = model.config.vocab_size
    worst, worst_rel = 0.0, 0.0
    for i, text in enumerate(TEXTS):
        hf_special = tok(text)["input_ids"]
        hf_plain = tok(text, add_special_tokens=False)["input_ids"]
        if hf_special != ours_special[i]:
            problems.append(f"ids of {text!r}: transformers {hf_special} vs ours {ours_special[i]}")
        if hf_plain != ours_plain[i]:
            problems.append(f"ids (no specials) of {text!r}: transformers {hf_plain} vs ours {ours_plain[i]}")
        if any(t >= vocab for t in hf_special):
            problems.append(f"transformers' ids of {text!r} reach past the vocabulary ({vocab}): {hf_special}")
        ids, ours = dumped[i]
        if ids != ours_special[i]:
            problems.append(f"eval's ids of {text!r} {ids} differ from `tokenizer encode --special` {ours_special[i]}")
        with torch.no_grad():
            hf = model(torch.tensor([ids])).logits[0].float().numpy()
        if hf.shape != ours.shape:
            problems.append(f"logits of {text!r}: transformers {hf.shape} vs ours {ours.shape}")
            continue
        diff, scale = logits_diff(hf, ours)
        worst, worst_rel = max(worst, diff), max(worst_rel, diff / scale)
        if diff > atol * scale:
            problems.append(f"logits of {text!r}: max |diff| {diff:.3g} > {atol:g} * {scale:.3g}")
    summary = (f"{type(tok).__name__}, {len(TEXTS)} texts' ids equal, "
               f"logits max |diff| {worst:.2e} ({worst_rel:.2e} of the logits' scale; tol {atol:g})")
    return problems, summary


def main():
    ap = parser(__doc__, "/tmp/zt_hf_load_check")
    ap.add_argument("--skip-hf", action="store_true", help="only the zerotrain half (no transformers needed)")
    a = ap.parse_args()
    zt = os.path.abspath(a.zerotrain)
    empty_dir(a.work)
    all_cases = cases(zt, a.work)
    names = chosen_cases(ap, a.only, all_cases)
    if not a.skip_hf:
        import transformers

        print(f"transformers {transformers.__version__}", flush=True)

    def check(name):
        final = all_cases[name]()
        files = sorted(f for f in os.listdir(final) if not f.endswith(".safetensors"))
        special = [our_ids(zt, final, t, True) for t in TEXTS]
        plain = [our_ids(zt, final, t, False) for t in TEXTS]
        dumped = dump_logits(zt, a.work, name, TEXTS, ["--model", final])
        if a.skip_hf:
            bad = [f"eval's ids of {t!r} differ" for t, (ids, _), want in zip(TEXTS, dumped, special) if ids != want]
            return bad, f"zerotrain half only: {', '.join(files)}"
        return check_hf(final, special, plain, dumped, a.atol)

    failed = run_cases(names, check)
    print(f"{len(names) - failed}/{len(names)} cases agree", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
