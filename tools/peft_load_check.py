#!/usr/bin/env python3
"""Does PEFT load a LoRA run's final/ as it is, and compute our logits with it? (issue 20
item 5; everything runs on the CPU)

    python3 tools/peft_load_check.py BUILD/zerotrain [--work DIR] [--only gpt2,llama3,qwen2]
                                     [--atol 1e-5]

For each case, trains a LoRA adapter for a few steps with `zerotrain train --device cpu` on a
tiny HF-made base of tests/data/hf (r 4, alpha 8, dropout 0, attention and MLP targets, a
byte-level BPE tokenizer trained on the data), then checks final/ with PEFT:
  - adapter_config.json: every key is a LoraConfig field of the installed PEFT (none that
    PEFT would drop or warn about), and PeftModel.from_pretrained(base, final) loads it
    without a warning (no unexpected or missing adapter keys);
  - the loaded adapter: every lora_A / lora_B tensor of adapter_model.safetensors lands in the
    PeftModel (same names, shapes, values) and the trained lora_B are nonzero;
  - the logits: transformers' AutoModelForCausalLM (float32) + PeftModel over the ids of a
    few texts equal the f32 logits of `zerotrain eval --model BASE --adapter final
    --dump-logits`, max |diff| <= atol * max(1, max |logit|) at every position; so do PEFT's
    merge_and_unload() logits; and the adapter moves the logits far more than atol (the
    comparison is not one of the base with itself). zerotrain merges in f32 (the model of
    merge_and_unload()): against the unmerged PeftModel the tolerance adds the difference
    PEFT itself has between its unmerged and merged logits (f32 rounding).
Cases:
  gpt2    tests/data/hf/gpt2, c_attn, c_proj (attn and mlp), c_fc: Conv1D, fan_in_fan_out
  llama3  tests/data/hf/llama3, q/k/v/o_proj, gate/up/down_proj (GQA, llama3 RoPE scaling)
  qwen2   tests/data/hf/qwen2, the same seven (q/k/v biases in the base)
Prints one line per case and exits 1 when any case differs (0 when all agree).

Runs with transformers 4.44 + PEFT 0.12 (tools/make_peft_fixtures.py's venv over Debian's
torch) and with transformers 5.x + PEFT 0.2x (the GPU machine): only APIs both have.
"""
import argparse
import dataclasses
import json
import logging
import os
import shutil
import subprocess
import sys
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = [os.path.join(ROOT, "data/text/artistic.txt"), os.path.join(ROOT, "data/text/apache-2.0.txt")]
TEXTS = [
    "Hello world",
    "The license grants you the right to copy, modify and distribute the Package.",
    "Numbers 12345 and 3.14159; symbols $%&!",
    " a leading space, and\na newline",
]
LLAMA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
CASES = {
    "gpt2": ("gpt2", ["c_attn", "c_proj", "c_fc"]),
    "llama3": ("llama3", LLAMA_TARGETS),
    "qwen2": ("qwen2", LLAMA_TARGETS),
}


def run(cmd, **kw):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout[-3000:]}")
    return r.stdout


def q(s):
    return json.dumps(s)  # a double-quoted JSON string is a YAML string


def train(zt, work, name, base, targets):
    """Trains the adapter; returns final/."""
    tok = os.path.join(work, name + "_tokenizer.json")
    run([zt, "tokenizer", "train", "--vocab-size", "300", "--out", tok] + DATA)
    out = os.path.join(work, name)
    yaml = os.path.join(work, name + ".yaml")
    with open(yaml, "w") as f:
        f.write(f"model: {{path: {q(base)}, tokenizer: {q(tok)}}}\n"
                f"lora:\n  r: 4\n  alpha: 8\n  dropout: 0.0\n  target_modules: [{', '.join(targets)}]\n"
                f"data:\n  train: [{', '.join(q(p) for p in DATA)}]\n  validation_fraction: 0.1\n  seq_len: 32\n"
                f"per_device_train_batch_size: 2\nmax_steps: 4\nlearning_rate: 1.0e-2\nwarmup_steps: 0\n"
                f"save_strategy: no\neval_interval: 0\nsteps_per_print: 1\nseed: 3\ndevice: cpu\n"
                f"output_dir: {q(out)}\noverwrite_output_dir: true\n")
    run([zt, "train", yaml])
    return os.path.join(out, "final")


def our_logits(zt, work, name, base, final):
    """{input_ids.i, logits.i} of `zerotrain eval --adapter --dump-logits` over TEXTS."""
    docs = os.path.join(work, name + "_texts.jsonl")
    with open(docs, "w", encoding="utf-8") as f:
        for t in TEXTS:
            f.write(json.dumps({"text": t}) + "\n")
    path = os.path.join(work, name + "_logits.safetensors")
    run([zt, "eval", "--model", base, "--adapter", final, "--tokenizer", final, "--data", docs, "--dump-logits", path,
         "--device", "cpu"])
    from safetensors.numpy import load_file

    return load_file(path)


def load_base(base_dir):
    """The base in float32. transformers 4.x reads tests/data/hf's rope_parameters (5.x's
    spelling) as nothing: given back as rope_theta / rope_scaling (make_peft_fixtures.py)."""
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(base_dir)
    if int(transformers.__version__.split(".")[0]) < 5:
        with open(os.path.join(base_dir, "config.json")) as f:
            rope = json.load(f).get("rope_parameters")
        if rope:
            config.rope_theta = rope["rope_theta"]
            scaling = {k: v for k, v in rope.items() if k != "rope_theta"}
            config.rope_scaling = scaling if scaling.get("rope_type", "default") != "default" else None
    try:
        model = AutoModelForCausalLM.from_pretrained(base_dir, config=config, dtype=torch.float32)
    except TypeError:  # transformers 4.x spells it torch_dtype
        model = AutoModelForCausalLM.from_pretrained(base_dir, config=config, torch_dtype=torch.float32)
    return model.eval()


class Captured(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.records = []

    def emit(self, record):
        self.records.append(record.getMessage())


def check_peft(base_dir, final, dumped, atol):
    """Problems found (empty: PEFT agrees), and a summary."""
    import torch
    from peft import LoraConfig, PeftModel
    from safetensors.torch import load_file

    problems = []
    with open(os.path.join(final, "adapter_config.json")) as f:
        cfg = json.load(f)
    fields = {f.name for f in dataclasses.fields(LoraConfig)}
    unknown = sorted(set(cfg) - fields)
    if unknown:
        problems.append(f"adapter_config.json keys that this PEFT's LoraConfig lacks: {unknown}")
    for key, want in (("peft_type", "LORA"), ("task_type", "CAUSAL_LM")):
        if cfg.get(key) != want:
            problems.append(f"adapter_config.json {key} {cfg.get(key)!r}, not {want!r}")

    load_from = final
    if unknown:  # this PEFT refuses them (0.12: TypeError): the rest is checked on a copy without them
        load_from = final.rstrip("/") + "_known_keys"
        shutil.rmtree(load_from, ignore_errors=True)
        shutil.copytree(final, load_from)
        with open(os.path.join(load_from, "adapter_config.json"), "w") as f:
            json.dump({k: v for k, v in cfg.items() if k in fields}, f, indent=2)

    base = load_base(base_dir)
    with torch.no_grad():
        base_logits = [base(torch.tensor([[int(x) for x in dumped[f"input_ids.{i}"]]])).logits[0].numpy().copy()
                       for i in range(len(TEXTS))]
    handler = Captured()
    loggers = [logging.getLogger(n) for n in ("peft", "transformers", "")]
    for lg in loggers:
        lg.addHandler(handler)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = PeftModel.from_pretrained(base, load_from)
    for lg in loggers:
        lg.removeHandler(handler)
    # PEFT's own warnings (unexpected config keys, missing or unexpected adapter keys);
    # deprecation notices of the libraries say nothing about the folder
    said = [str(w.message) for w in caught if not issubclass(w.category, (DeprecationWarning, FutureWarning))]
    said += handler.records
    if said:
        problems.append(f"PeftModel.from_pretrained warned: {said}")
    model.eval()
    if type(model.peft_config["default"]).__name__ != "LoraConfig":
        problems.append(f"loaded as {type(model.peft_config['default']).__name__}")

    # every saved tensor is in the model, as saved
    saved = load_file(os.path.join(final, "adapter_model.safetensors"))
    params = dict(model.named_parameters())
    for key, value in saved.items():
        # PEFT's saved name base_model.model.X.lora_A.weight is the parameter X.lora_A.default.weight
        name = key.replace(".lora_A.weight", ".lora_A.default.weight").replace(".lora_B.weight", ".lora_B.default.weight")
        if name not in params:
            problems.append(f"{key}: no parameter {name} in the PeftModel")
        elif tuple(params[name].shape) != tuple(value.shape):
            problems.append(f"{key}: saved {tuple(value.shape)}, PEFT's {tuple(params[name].shape)}")
        elif not torch.equal(params[name].detach().float(), value.float()):
            problems.append(f"{key}: PEFT's loaded values differ from the file's")
    lora_params = [n for n in params if ".lora_A." in n or ".lora_B." in n]
    if len(lora_params) != len(saved):
        problems.append(f"{len(saved)} tensors saved, the PeftModel has {len(lora_params)} lora parameters")
    if not any(".lora_B." in k and float(v.abs().max()) > 0 for k, v in saved.items()):
        problems.append("every lora_B is zero: the adapter was not trained")

    worst, worst_merged, moved, own = 0.0, 0.0, 0.0, 0.0
    peft_logits = []
    for i in range(len(TEXTS)):
        ids = torch.tensor([[int(x) for x in dumped[f"input_ids.{i}"]]])
        with torch.no_grad():
            peft_logits.append(model(ids).logits[0].float().numpy())
    merged = model.merge_and_unload()
    merged.eval()
    merged_logits = []
    for i in range(len(TEXTS)):
        ids = torch.tensor([[int(x) for x in dumped[f"input_ids.{i}"]]])
        with torch.no_grad():
            merged_logits.append(merged(ids).logits[0].float().numpy())
        if merged_logits[i].shape == peft_logits[i].shape:
            own = max(own, float(abs(merged_logits[i] - peft_logits[i]).max()) / max(1.0, float(abs(merged_logits[i]).max())))
    # zerotrain merges the adapter in f32 (merge_and_unload's model): against the unmerged
    # PeftModel the tolerance also takes PEFT's own unmerged-vs-merged rounding
    tol_unmerged = atol + own
    for i, text in enumerate(TEXTS):
        hf = peft_logits[i]
        ours = dumped[f"logits.{i}"]
        if hf.shape != ours.shape:
            problems.append(f"logits of {text!r}: PEFT {hf.shape} vs ours {ours.shape}")
            continue
        scale = max(1.0, float(abs(hf).max()))
        diff = float(abs(hf - ours).max()) / scale
        worst = max(worst, diff)
        moved = max(moved, float(abs(hf - base_logits[i]).max()) / scale)
        if diff > tol_unmerged:
            problems.append(f"PeftModel logits of {text!r}: max |diff| {diff * scale:.3g} > {tol_unmerged:.3g} * {scale:.3g}")
    if moved <= 100 * atol:
        problems.append(f"the adapter moves the logits by {moved:.2e} of their scale only (<= 100 * atol)")
    for i, text in enumerate(TEXTS):
        m = merged_logits[i]
        ours = dumped[f"logits.{i}"]
        if m.shape != ours.shape:
            continue
        scale = max(1.0, float(abs(m).max()))
        diff = float(abs(m - ours).max()) / scale
        worst_merged = max(worst_merged, diff)
        if diff > atol:
            problems.append(f"merge_and_unload() logits of {text!r}: max |diff| {diff * scale:.3g} > {atol:g} * {scale:.3g}")
    summary = (f"{len(saved)} tensors, {len(cfg) - len(unknown)}/{len(cfg)} config keys known to LoraConfig, "
               f"{len(said)} load warnings; "
               f"{len(TEXTS)} texts, max |diff| / logits' scale: merge_and_unload {worst_merged:.2e} (tol {atol:g}), "
               f"PeftModel {worst:.2e} (tol {atol:g} + PEFT's own unmerged-vs-merged {own:.2e}); "
               f"the adapter moved them {moved:.2e}")
    return problems, summary


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("zerotrain", help="path of the zerotrain binary")
    ap.add_argument("--work", default="/tmp/zt_peft_load_check", help="scratch directory (emptied first)")
    ap.add_argument("--only", default="", help="comma-separated cases (default: all)")
    ap.add_argument("--atol", type=float, default=1e-5)
    a = ap.parse_args()
    zt = os.path.abspath(a.zerotrain)
    names = [n for n in a.only.split(",") if n] or list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        ap.error(f"unknown case(s) {unknown}; cases: {', '.join(CASES)}")
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    import peft
    import torch
    import transformers

    print(f"transformers {transformers.__version__}, peft {peft.__version__}, torch {torch.__version__}", flush=True)
    failed = 0
    for name in names:
        family, targets = CASES[name]
        base = os.path.join(ROOT, "tests/data/hf", family)
        try:
            final = train(zt, a.work, name, base, targets)
            dumped = our_logits(zt, a.work, name, base, final)
            bad, summary = check_peft(base, final, dumped, a.atol)
        except Exception as e:  # one case's failure must not hide the others
            bad, summary = [f"{type(e).__name__}: {e}"], "error"
        if bad:
            failed += 1
            print(f"{name}: FAIL ({summary})", flush=True)
            for p in bad:
                print(f"    {p}", flush=True)
        else:
            print(f"{name}: ok ({summary})", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
