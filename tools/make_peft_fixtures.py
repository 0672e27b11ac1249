#!/usr/bin/env python3
"""Makes the PEFT LoRA adapters of tests/data/peft with PEFT itself, over the tiny HF models
of tests/data/hf (tools/make_hf_fixtures.py), and records what PEFT computes with them, for
zerotrain's adapter reader and `zerotrain lora merge` to be checked against
(tests/unit/lora_adapter_test.cpp, tests/e2e/lora_merge_test.cpp):

  python3 tools/make_peft_fixtures.py [OUT_DIR [NAME ...]]   (default tests/data/peft, every adapter;
                                                              run from the repo root)

Made on CPU with Debian's torch 1.13 and PyPI transformers 4.44.2 + peft 0.12.0:
  python3 -m venv --system-site-packages /tmp/peftvenv   # /usr/bin/python3, which has torch
  /tmp/peftvenv/bin/pip install transformers==4.44.2 peft==0.12.0 accelerate==0.33.0

One folder per adapter, each what PeftModel.save_pretrained writes (adapter_config.json,
adapter_model.safetensors; its README.md model card is dropped), r 4, lora_alpha 8, every
lora_A / lora_B drawn at random (B nonzero, so merging changes the weights), plus
reference.safetensors:
  input_ids        I32 [T]     the bytes of TEXT (the models take byte ids)
  logits           F32 [T, V]  merge_and_unload()'s logits on input_ids
  merged.<name>    F32         merge_and_unload()'s tensors that differ from the base's,
                               under the base's HF names: layer 0's attention and the tensors
                               outside the layers only (the files stay small; the logits
                               cover every layer and the MLPs)
The adapters:
  gpt2_c_attn       GPT-2, c_attn, fan_in_fan_out (Conv1D)
  gpt2_all_linear   GPT-2, "all-linear" (c_attn, both c_proj, c_fc), bias "all", use_rslora
  llama3_qv         Llama-3, q_proj + v_proj (GQA: v is narrower than q)
  llama3_all        Llama-3, all seven, modules_to_save lm_head (untied), init gaussian
  qwen2_lora_only   Qwen2, k_proj o_proj gate_proj up_proj down_proj, bias "lora_only"
                    (k_proj's bias is trained, but PEFT 0.12 does not save it: it looks
                    for k_proj.bias, the wrapped layer's is k_proj.base_layer.bias)
  gpt2_tied_wte     GPT-2 (tied head), c_attn, modules_to_save wte: PEFT's copy unties the
                    pair, the merged model's head is the base's embedding
  gpt2_tied_lm_head GPT-2 (tied head), c_attn, modules_to_save lm_head: the merged model's
                    head is the trained copy, its embedding the base's
"""
import json
import os
import shutil
import sys

import torch
from peft import LoraConfig, get_peft_model
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zt_check_common import hf_base_f32, make_fixtures  # noqa: E402  (the tiny bases as transformers 4.x reads them)

TEXT = "LoRA merges."
R, ALPHA = 4, 8

ADAPTERS = {
    "gpt2_c_attn": ("gpt2", dict(target_modules=["c_attn"], fan_in_fan_out=True)),
    "gpt2_all_linear": ("gpt2", dict(target_modules="all-linear", fan_in_fan_out=True, bias="all",
                                     use_rslora=True)),
    "llama3_qv": ("llama3", dict(target_modules=["q_proj", "v_proj"])),
    "llama3_all": ("llama3", dict(target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                  "down_proj"], modules_to_save=["lm_head"],
                                  init_lora_weights="gaussian")),
    "qwen2_lora_only": ("qwen2", dict(target_modules=["k_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
                                      bias="lora_only")),
    "gpt2_tied_wte": ("gpt2", dict(target_modules=["c_attn"], fan_in_fan_out=True, modules_to_save=["wte"])),
    "gpt2_tied_lm_head": ("gpt2", dict(target_modules=["c_attn"], fan_in_fan_out=True, modules_to_save=["lm_head"])),
}


def randomize(model, seed):
    """Every trainable tensor drawn anew: lora_A/lora_B, trained biases, modules_to_save copies."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.requires_grad:
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)


def is_layer0_or_global(name):
    """Layer 0's attention tensors and those outside the layers (the MLP's are the largest)."""
    if ".mlp." in name:
        return False
    parts = name.split(".")
    for i, part in enumerate(parts[:-1]):
        if part in ("h", "layers"):
            return parts[i + 1] == "0"
    return True


def make(out_dir, name, family, kwargs, seed):
    base_dir = os.path.join("tests/data/hf", family)
    base = hf_base_f32(base_dir)
    base_state = {k: v.clone() for k, v in base.state_dict().items()}
    config = LoraConfig(r=R, lora_alpha=ALPHA, lora_dropout=0.0, task_type="CAUSAL_LM", **kwargs)
    model = get_peft_model(base, config)
    randomize(model, seed)
    model.eval()
    folder = os.path.join(out_dir, name)
    shutil.rmtree(folder, ignore_errors=True)
    model.save_pretrained(folder)
    readme = os.path.join(folder, "README.md")
    if os.path.exists(readme):
        os.remove(readme)

    # The references come from the saved files, reloaded as a user would: what PEFT 0.12 does
    # not save (bias "lora_only" of a layer it wraps: it looks for X.bias, the layer's is
    # X.base_layer.bias) is then not in them either.
    from peft import PeftModel
    model = PeftModel.from_pretrained(hf_base_f32(base_dir), folder)
    model.eval()
    ids = torch.tensor([list(TEXT.encode())], dtype=torch.long)
    with torch.no_grad():
        adapter_logits = model(ids).logits[0]
    merged = model.merge_and_unload()
    merged.eval()
    with torch.no_grad():
        logits = merged(ids).logits[0]
    # the merged model computes what the adapted one does
    assert torch.allclose(logits, adapter_logits, atol=1e-4), (logits - adapter_logits).abs().max()
    # the base as read here computes what transformers 5.x recorded in expected.json
    with open(os.path.join(base_dir, "expected.json")) as f:
        expected = json.load(f)
    with torch.no_grad():
        base_logits = hf_base_f32(base_dir)(torch.tensor([expected["prompt_ids"]])).logits[0, -1]
    assert torch.allclose(base_logits, torch.tensor(expected["last_logits"]), atol=1e-4), name
    ref = {"input_ids": ids[0].to(torch.int32), "logits": logits.contiguous()}
    for k, v in merged.state_dict().items():
        if k in base_state and not torch.equal(base_state[k], v) and is_layer0_or_global(k):
            ref["merged." + k] = v.detach().float().contiguous()
    save_file(ref, os.path.join(folder, "reference.safetensors"), metadata={"text": TEXT})
    print(name, sorted(os.listdir(folder)), len(ref) - 2, "merged tensors")


if __name__ == "__main__":
    make_fixtures(ADAPTERS, "adapter", "tests/data/peft", 1000, make)
