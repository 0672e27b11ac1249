#!/usr/bin/env python3
"""Does PEFT load a LoRA run's final/ as it is, and compute our logits with it? (issue 20
item 5; everything runs on the CPU)

    python3 tools/peft_load_check.py BUILD/zerotrain [--work DIR] [--only gpt2,llama3,qwen2,gpt2_saved,qwen2_lora_only]
                                     [--atol 1e-5]

For each case, trains a LoRA adapter for a few steps with `zerotrain train --device cpu` on a
tiny HF-made base of tests/data/hf (r 4, alpha 8, dropout 0, attention and MLP targets, a
byte-level BPE tokenizer trained on the data), then checks final/ with PEFT:
  - adapter_config.json: every key is a LoraConfig field of the installed PEFT (none that
    PEFT would drop or warn about), and PeftModel.from_pretrained(base, final) loads it
    without a warning (no unexpected or missing adapter keys) beyond those PEFT gives when it
    loads the adapter it saves itself for the same config (advice about the configuration:
    PEFT 0.18+ on modules_to_save copies of a tied pair suggests ensure_weight_tying);
  - the loaded adapter: every lora_A / lora_B tensor (and modules_to_save copy) of
    adapter_model.safetensors lands in the PeftModel (same names, shapes, values) and the
    trained lora_B are nonzero;
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
  gpt2_saved  tests/data/hf/gpt2, c_attn, modules_to_save [wte, lm_head]: copies of its tied
          pair, which PEFT's ModulesToSaveWrapper unties (saved as the modules' own keys)
  qwen2_lora_only  tests/data/hf/qwen2, k_proj and o_proj, bias lora_only: k's bias trained
          (saved as k_proj.base_layer.bias), q's and v's, packed with it, held at the base's
Prints one line per case and exits 1 when any case differs (0 when all agree).

Runs with transformers 4.44 + PEFT 0.12 (tools/make_peft_fixtures.py's venv over Debian's
torch) and with transformers 5.x + PEFT 0.2x (the GPU machine): only APIs both have.
"""
import dataclasses
import json
import logging
import os
import shutil
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # see zt_check_common's docstring
from zt_check_common import (CHECK_TEXTS, ROOT, chosen_cases, dump_logits, empty_dir, hf_base_f32, logits_diff,
                             parser, q, run_cases, train, train_tokenizer)

TEXTS = CHECK_TEXTS
LLAMA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
CASES = {  # name: (family, target_modules, more lora: settings)
    "gpt2": ("gpt2", ["c_attn", "c_proj", "c_fc"], {}),
    "llama3": ("llama3", LLAMA_TARGETS, {}),
    "qwen2": ("qwen2", LLAMA_TARGETS, {}),
    "gpt2_saved": ("gpt2", ["c_attn"], {"modules_to_save": "[wte, lm_head]"}),
    "qwen2_lora_only": ("qwen2", ["k_proj", "o_proj"], {"bias": "lora_only"}),
}


def train_adapter(zt, work, name, base, targets, settings):
    """Trains a LoRA adapter of base on its own tokenizer (300 tokens); returns final/."""
    tok = train_tokenizer(zt, work, name, 300)
    lora = f"lora:\n  r: 4\n  alpha: 8\n  dropout: 0.0\n  target_modules: [{', '.join(targets)}]\n"
    lora += "".join(f"  {key}: {value}\n" for key, value in settings.items())
    # a high rate without warmup: 4 steps move the adapter far from its init (lora_B = 0)
    return train(zt, work, name, f"{{path: {q(base)}, tokenizer: {q(tok)}}}", 4, "1.0e-2",
                 extra=lora + "warmup_steps: 0\n")


class Captured(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.records = []

    def emit(self, record):
        self.records.append(record.getMessage())


def load_with_warnings(base, folder):
    """PeftModel.from_pretrained(base, folder) and what it warned (warnings and log records),
    without the libraries' deprecation notices, which say nothing about the folder."""
    from peft import PeftModel

    handler = Captured()
    loggers = [logging.getLogger(n) for n in ("peft", "transformers", "")]
    for lg in loggers:
        lg.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model = PeftModel.from_pretrained(base, folder)
    finally:
        for lg in loggers:
            lg.removeHandler(handler)
    said = [str(w.message) for w in caught if not issubclass(w.category, (DeprecationWarning, FutureWarning))]
    return model, said + handler.records


def peft_own_warnings(base_dir, folder):
    """What PEFT warns when it loads the adapter it saves itself for folder's config: advice
    about the configuration (PEFT 0.18+ on modules_to_save copies of a tied pair: set
    ensure_weight_tying), not about our files, so not counted against them."""
    from peft import LoraConfig, get_peft_model

    own = folder.rstrip("/") + "_peft_own"
    shutil.rmtree(own, ignore_errors=True)
    try:
        get_peft_model(hf_base_f32(base_dir), LoraConfig.from_pretrained(folder)).save_pretrained(own)
        return load_with_warnings(hf_base_f32(base_dir), own)[1]
    finally:
        shutil.rmtree(own, ignore_errors=True)  # scratch: only its warnings are wanted


def check_peft(base_dir, final, dumped, atol):
    """Problems found (empty: PEFT agrees), and a summary. dumped: dump_logits' (ids, logits)
    per text of TEXTS."""
    import torch
    from peft import LoraConfig
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

    base = hf_base_f32(base_dir)
    with torch.no_grad():
        base_logits = [base(torch.tensor([ids])).logits[0].numpy().copy() for ids, _ in dumped]
    model, said = load_with_warnings(base, load_from)
    # only warnings PEFT does not give for its own adapter of the same config (unexpected
    # config keys, missing or unexpected adapter keys) are about the folder
    own_said = peft_own_warnings(base_dir, load_from) if said else []
    said = [w for w in said if w not in own_said]
    if said:
        problems.append(f"PeftModel.from_pretrained warned: {said}")
    model.eval()
    if type(model.peft_config["default"]).__name__ != "LoraConfig":
        problems.append(f"loaded as {type(model.peft_config['default']).__name__}")

    # every saved tensor is in the model, as saved
    saved = load_file(os.path.join(final, "adapter_model.safetensors"))
    params = dict(model.named_parameters())
    for key, value in saved.items():
        # PEFT's saved name base_model.model.X.lora_A.weight is the parameter X.lora_A.default.weight;
        # a modules_to_save module's X.weight is its trained copy X.modules_to_save.default.weight;
        # a trained bias (bias all / lora_only) is the base's parameter under its own name
        if ".lora_A." in key or ".lora_B." in key:
            name = key.replace(".lora_A.weight", ".lora_A.default.weight").replace(".lora_B.weight",
                                                                                ".lora_B.default.weight")
        elif key.endswith(".bias"):
            name = key
        else:
            module, _, leaf = key.rpartition(".")
            name = module + ".modules_to_save.default." + leaf
        if name not in params:
            problems.append(f"{key}: no parameter {name} in the PeftModel")
        elif tuple(params[name].shape) != tuple(value.shape):
            problems.append(f"{key}: saved {tuple(value.shape)}, PEFT's {tuple(params[name].shape)}")
        elif not torch.equal(params[name].detach().float(), value.float()):
            problems.append(f"{key}: PEFT's loaded values differ from the file's")
    trained = [n for n in params if ".lora_A." in n or ".lora_B." in n or ".modules_to_save." in n]
    saved_trained = [k for k in saved if not k.endswith(".bias")]
    if len(trained) != len(saved_trained):
        problems.append(f"{len(saved_trained)} lora and modules_to_save tensors saved, the PeftModel has "
                        f"{len(trained)}")
    if not any(".lora_B." in k and float(v.abs().max()) > 0 for k, v in saved.items()):
        problems.append("every lora_B is zero: the adapter was not trained")

    worst, worst_merged, moved, own = 0.0, 0.0, 0.0, 0.0
    peft_logits = []
    for ids, _ in dumped:
        with torch.no_grad():
            peft_logits.append(model(torch.tensor([ids])).logits[0].float().numpy())
    merged = model.merge_and_unload()
    merged.eval()
    merged_logits = []
    for i, (ids, _) in enumerate(dumped):
        with torch.no_grad():
            merged_logits.append(merged(torch.tensor([ids])).logits[0].float().numpy())
        if merged_logits[i].shape == peft_logits[i].shape:
            diff, scale = logits_diff(merged_logits[i], peft_logits[i])
            own = max(own, diff / scale)
    # zerotrain merges the adapter in f32 (merge_and_unload's model): against the unmerged
    # PeftModel the tolerance also takes PEFT's own unmerged-vs-merged rounding
    tol_unmerged = atol + own
    for i, text in enumerate(TEXTS):
        hf = peft_logits[i]
        ours = dumped[i][1]
        if hf.shape != ours.shape:
            problems.append(f"logits of {text!r}: PEFT {hf.shape} vs ours {ours.shape}")
            continue
        diff, scale = logits_diff(hf, ours)
        diff /= scale
        worst = max(worst, diff)
        moved = max(moved, logits_diff(hf, base_logits[i])[0] / scale)
        if diff > tol_unmerged:
            problems.append(f"PeftModel logits of {text!r}: max |diff| {diff * scale:.3g} > {tol_unmerged:.3g} * {scale:.3g}")
    if moved <= 100 * atol:
        problems.append(f"the adapter moves the logits by {moved:.2e} of their scale only (<= 100 * atol)")
    for i, text in enumerate(TEXTS):
        m = merged_logits[i]
        ours = dumped[i][1]
        if m.shape != ours.shape:
            continue
        diff, scale = logits_diff(m, ours)
        diff /= scale
        worst_merged = max(worst_merged, diff)
        if diff > atol:
            problems.append(f"merge_and_unload() logits of {text!r}: max |diff| {diff * scale:.3g} > {atol:g} * {scale:.3g}")
    summary = (f"{len(saved)} tensors, {len(cfg) - len(unknown)}/{len(cfg)} config keys known to LoraConfig, "
               f"{len(said)} load warnings{f' (+{len(own_said)} PEFT gives its own)' if own_said else ''}; "
               f"{len(TEXTS)} texts, max |diff| / logits' scale: merge_and_unload {worst_merged:.2e} (tol {atol:g}), "
               f"PeftModel {worst:.2e} (tol {atol:g} + PEFT's own unmerged-vs-merged {own:.2e}); "
               f"the adapter moved them {moved:.2e}")
    return problems, summary


def main():
    ap = parser(__doc__, "/tmp/zt_peft_load_check")
    a = ap.parse_args()
    zt = os.path.abspath(a.zerotrain)
    names = chosen_cases(ap, a.only, CASES)
    empty_dir(a.work)
    import peft
    import torch
    import transformers

    print(f"transformers {transformers.__version__}, peft {peft.__version__}, torch {torch.__version__}", flush=True)

    def check(name):
        family, targets, settings = CASES[name]
        base = os.path.join(ROOT, "tests/data/hf", family)
        final = train_adapter(zt, a.work, name, base, targets, settings)
        dumped = dump_logits(zt, a.work, name, TEXTS, ["--model", base, "--adapter", final, "--tokenizer", final])
        return check_peft(base, final, dumped, a.atol)

    failed = run_cases(names, check)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
