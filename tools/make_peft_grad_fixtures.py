#!/usr/bin/env python3
"""Makes tests/data/peft_grads: LoRA adapters with PEFT's gradients of HF's causal LM loss on
one batch, for zerotrain's LoRA backward to be checked against PEFT + PyTorch on the same
weights (tests/e2e/lora_peft_grads_test.cpp; issue 20 item 5):

  python3 tools/make_peft_grad_fixtures.py [OUT_DIR [CASE ...]]   (default tests/data/peft_grads,
                                                                  every case; run from the repo root)

Made on CPU with PyPI transformers 4.44.2 + peft 0.12.0 (tools/make_peft_fixtures.py's venv).
One folder per case, over the tiny HF models of tests/data/hf:
  adapter_config.json, adapter_model.safetensors   what PeftModel.save_pretrained writes
      (r 2, lora_alpha 4, dropout 0; every lora_A and lora_B drawn at random, B nonzero, so
      both gradients are nonzero; README.md dropped)
  reference.safetensors
      input_ids                 I32 [T]   the bytes of TEXT (the models take byte ids)
      loss                      F32 [1]   HF's causal LM loss (labels = input_ids: the mean
                                          over the T-1 shifted tokens)
      grad.<adapter tensor key> F32       d loss / d that tensor, under the key it has in
                                          adapter_model.safetensors (modules_to_save copies:
                                          the module's key, the copy's gradient)
The forward and backward run in float64 (the base and adapters cast up after loading), so
the references carry no f32 rounding of their own.
Cases:
  gpt2     GPT-2, c_attn, c_proj (attn and mlp), c_fc: Conv1D, fan_in_fan_out
  llama3   Llama-3, q/k/v/o_proj, gate/up/down_proj (GQA, llama3 RoPE scaling)
  qwen2    Qwen2, q/k/v/o_proj, gate/up/down_proj (q/k/v biases), use_rslora
  gpt2_wte       GPT-2 (tied head), c_attn, modules_to_save [wte]: the input reads the trained
                 copy, the head the base's embedding
  gpt2_lm_head   GPT-2 (tied head), c_attn, modules_to_save [lm_head]: the head reads the
                 trained copy, the input the base's embedding
  llama3_saved   Llama-3 (untied), q/v_proj, modules_to_save [embed_tokens, lm_head]
"""
import os
import shutil
import sys

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zt_check_common import hf_base_f32, make_fixtures  # noqa: E402  (rope_parameters given back to 4.x)

TEXT = "PEFT's gradients."
R, ALPHA = 2, 4
LLAMA = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
CASES = {
    "gpt2": ("gpt2", dict(target_modules=["c_attn", "c_proj", "c_fc"], fan_in_fan_out=True)),
    "llama3": ("llama3", dict(target_modules=LLAMA)),
    "qwen2": ("qwen2", dict(target_modules=LLAMA, use_rslora=True)),
    "gpt2_wte": ("gpt2", dict(target_modules=["c_attn"], fan_in_fan_out=True, modules_to_save=["wte"])),
    "gpt2_lm_head": ("gpt2", dict(target_modules=["c_attn"], fan_in_fan_out=True, modules_to_save=["lm_head"])),
    "llama3_saved": ("llama3", dict(target_modules=["q_proj", "v_proj"], modules_to_save=["embed_tokens", "lm_head"])),
}


def parameter_of(params, key):
    """The PeftModel parameter an adapter_model.safetensors key holds: lora_A/B under the
    adapter's name, a modules_to_save module's tensor as its trained copy."""
    for ab in (".lora_A.weight", ".lora_B.weight"):
        if key.endswith(ab):
            return params[key[: -len(ab)] + ab.replace(".weight", ".default.weight")]
    module, dot, leaf = key.rpartition(".")
    return params[module + ".modules_to_save.default." + leaf]


def make(out_dir, name, family, kwargs, seed):
    base_dir = os.path.join("tests/data/hf", family)
    config = LoraConfig(r=R, lora_alpha=ALPHA, lora_dropout=0.0, task_type="CAUSAL_LM", **kwargs)
    model = get_peft_model(hf_base_f32(base_dir), config)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.requires_grad:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    folder = os.path.join(out_dir, name)
    shutil.rmtree(folder, ignore_errors=True)
    model.save_pretrained(folder)
    readme = os.path.join(folder, "README.md")
    if os.path.exists(readme):
        os.remove(readme)

    # the references from the saved files, reloaded as a user would, in float64
    model = PeftModel.from_pretrained(hf_base_f32(base_dir), folder, is_trainable=True)
    model = model.double()
    model.eval()  # no dropout anywhere (the configs' are 0 as well)
    ids = torch.tensor([list(TEXT.encode())], dtype=torch.long)
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    saved = load_file(os.path.join(folder, "adapter_model.safetensors"))
    params = dict(model.named_parameters())
    ref = {"input_ids": ids[0].to(torch.int32), "loss": out.loss.detach().float().reshape(1)}
    for key, value in saved.items():
        p = parameter_of(params, key)
        assert tuple(p.shape) == tuple(value.shape) and torch.equal(p.detach().float(), value), key
        assert p.grad is not None and float(p.grad.abs().max()) > 0, key
        ref["grad." + key] = p.grad.float().contiguous()
    save_file(ref, os.path.join(folder, "reference.safetensors"), metadata={"text": TEXT})
    print(name, f"loss {out.loss.item():.6f}", len(saved), "adapter tensors")


if __name__ == "__main__":
    make_fixtures(CASES, "case", "tests/data/peft_grads", 2000, make)
