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
import argparse
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = [os.path.join(ROOT, "data/text/artistic.txt"), os.path.join(ROOT, "data/text/apache-2.0.txt")]
TEXTS = [
    "Hello world",
    "The license grants you the right to copy, modify and distribute the Package.",
    "Numbers 12345 and 3.14159; symbols $%&!",
    " a leading space, and\na newline",
    "caf\u00e9 na\u00efve \u65e5\u672c\u8a9e",
]
GPT2_CONFIG = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 2, "n_head": 2, "n_embd": 64,
               "n_positions": 128, "vocab_size": 50257}  # bos/eos: GPT2Config's defaults (50256)


def run(cmd, **kw):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout[-3000:]}")
    return r.stdout


def q(s):
    return json.dumps(s)  # a double-quoted JSON string is a YAML string


def train(zt, work, name, model_yaml):
    out = os.path.join(work, name)
    yaml = os.path.join(work, name + ".yaml")
    with open(yaml, "w") as f:
        f.write(f"model: {model_yaml}\n"
                f"data:\n  train: [{', '.join(q(p) for p in DATA)}]\n  validation_fraction: 0.1\n  seq_len: 32\n"
                f"per_device_train_batch_size: 2\nmax_steps: 3\nlearning_rate: 1.0e-3\nsave_strategy: no\n"
                f"eval_interval: 0\nsteps_per_print: 1\nseed: 3\ndevice: cpu\noutput_dir: {q(out)}\n"
                f"overwrite_output_dir: true\n")
    run([zt, "train", yaml])
    return os.path.join(out, "final")


def cases(zt, work):
    """name -> a function that trains and returns the final/ directory."""
    def gpt2():
        cfg = os.path.join(work, "gpt2_config.json")
        with open(cfg, "w") as f:
            json.dump(GPT2_CONFIG, f)
        return train(zt, work, "gpt2", "{config: %s, tokenizer: %s}" % (
            q(cfg), q(os.path.join(ROOT, "tests/data/gpt2/vocab.json"))))

    def llama():
        return train(zt, work, "llama", "{preset: tiny-llama}")

    def qwen2():
        tok = os.path.join(work, "qwen2_tokenizer.json")
        run([zt, "tokenizer", "train", "--vocab-size", "320", "--out", tok] + DATA)
        return train(zt, work, "qwen2", "{path: %s, tokenizer: %s}" % (q(os.path.join(ROOT, "tests/data/hf/qwen2")), q(tok)))

    def llama2():
        return train(zt, work, "llama2", "{preset: tiny-llama, tokenizer: %s}" % q(
            os.path.join(ROOT, "tests/data/hf/llama2_tokenizer.model")))

    def llama2hf():
        return train(zt, work, "llama2hf", "{path: %s}" % q(os.path.join(ROOT, "tests/data/hf/llama2")))

    return {"gpt2": gpt2, "llama": llama, "qwen2": qwen2, "llama2": llama2, "llama2hf": llama2hf}


def our_ids(zt, final, text, special):
    out = run([zt, "tokenizer", "encode", "--tokenizer", final, "--text", text] + (["--special"] if special else []))
    return [int(x) for x in out.split()]


def our_logits(zt, work, name, final):
    """{input_ids.i, logits.i} of `zerotrain eval --dump-logits` over TEXTS (one document each)."""
    docs = os.path.join(work, name + "_texts.jsonl")
    with open(docs, "w", encoding="utf-8") as f:
        for t in TEXTS:
            f.write(json.dumps({"text": t}) + "\n")
    path = os.path.join(work, name + "_logits.safetensors")
    run([zt, "eval", "--model", final, "--data", docs, "--dump-logits", path, "--device", "cpu"])
    from safetensors.numpy import load_file

    return load_file(path)


def check_hf(final, ours_special, ours_plain, dumped, atol):
    """Problems found (empty: transformers agrees), and a summary."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    problems = []
    tok = AutoTokenizer.from_pretrained(final)
    try:
        model = AutoModelForCausalLM.from_pretrained(final, dtype=torch.float32)
    except TypeError:  # transformers 4.x spells it torch_dtype
        model = AutoModelForCausalLM.from_pretrained(final, torch_dtype=torch.float32)
    model.eval()
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
        ids = [int(x) for x in dumped[f"input_ids.{i}"]]
        if ids != ours_special[i]:
            problems.append(f"eval's ids of {text!r} {ids} differ from `tokenizer encode --special` {ours_special[i]}")
        with torch.no_grad():
            hf = model(torch.tensor([ids])).logits[0].float().numpy()
        ours = dumped[f"logits.{i}"]
        if hf.shape != ours.shape:
            problems.append(f"logits of {text!r}: transformers {hf.shape} vs ours {ours.shape}")
            continue
        diff = float(abs(hf - ours).max())
        scale = max(1.0, float(abs(hf).max()))
        worst, worst_rel = max(worst, diff), max(worst_rel, diff / scale)
        if diff > atol * scale:
            problems.append(f"logits of {text!r}: max |diff| {diff:.3g} > {atol:g} * {scale:.3g}")
    summary = (f"{type(tok).__name__}, {len(TEXTS)} texts' ids equal, "
               f"logits max |diff| {worst:.2e} ({worst_rel:.2e} of the logits' scale; tol {atol:g})")
    return problems, summary


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("zerotrain", help="path of the zerotrain binary")
    ap.add_argument("--work", default="/tmp/zt_hf_load_check", help="scratch directory (emptied first)")
    ap.add_argument("--only", default="", help="comma-separated cases (default: all)")
    ap.add_argument("--atol", type=float, default=1e-5)
    ap.add_argument("--skip-hf", action="store_true", help="only the zerotrain half (no transformers needed)")
    a = ap.parse_args()
    zt = os.path.abspath(a.zerotrain)
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    all_cases = cases(zt, a.work)
    names = [n for n in a.only.split(",") if n] or list(all_cases)
    unknown = [n for n in names if n not in all_cases]
    if unknown:
        ap.error(f"unknown case(s) {unknown}; cases: {', '.join(all_cases)}")
    if not a.skip_hf:
        import transformers

        print(f"transformers {transformers.__version__}", flush=True)
    failed = 0
    for name in names:
        try:
            final = all_cases[name]()
            files = sorted(f for f in os.listdir(final) if not f.endswith(".safetensors"))
            special = [our_ids(zt, final, t, True) for t in TEXTS]
            plain = [our_ids(zt, final, t, False) for t in TEXTS]
            dumped = our_logits(zt, a.work, name, final)
            if a.skip_hf:
                bad = [f"eval's ids of {t!r} differ" for i, t in enumerate(TEXTS)
                       if [int(x) for x in dumped[f"input_ids.{i}"]] != special[i]]
                summary = f"zerotrain half only: {', '.join(files)}"
            else:
                bad, summary = check_hf(final, special, plain, dumped, a.atol)
        except Exception as e:  # one case's failure must not hide the others
            bad, summary = [f"{type(e).__name__}: {e}"], "error"
        if bad:
            failed += 1
            print(f"{name}: FAIL ({summary})", flush=True)
            for p in bad:
                print(f"    {p}", flush=True)
        else:
            print(f"{name}: ok ({summary})", flush=True)
    print(f"{len(names) - failed}/{len(names)} cases agree", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
