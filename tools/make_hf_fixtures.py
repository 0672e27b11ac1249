#!/usr/bin/env python3
"""Makes the HF model directories of tests/data/hf with transformers itself (run on the GPU
machine, which has transformers 5.17; CPU torch is enough) and records what HF computes on
them, for zerotrain's tests to compare against (tests/unit/hf_fixtures_test.cpp, and the
GPU half in tests/cuda/eval_device_test.cpp):

  python3 tools/make_hf_fixtures.py OUT_DIR --sp-model tokenizer.model [--sp-ids ids.json]

(--sp-ids: {"vocab_size": N, "prompt_ids": [...]} for LLAMA2_PROMPT, computed with the
sentencepiece package where the GPU machine has none.)

One directory per family, each small (random weights, f32, a few hundred KiB):
  gpt2     GPT-2 (learned positions, tied head), byte ids
  llama3   Llama-3 (GQA 4/2, rope_type llama3, factor 8, original context 64, untied head)
  qwen2    Qwen2 (q/k/v biases, GQA 4/2, tied head)
  llama2   Llama-2 (MHA, SentencePiece tokenizer.model: the --sp-model file, made with
           sentencepiece from data/text; tokenizer_config.json as HF's LlamaTokenizer)
Each holds what save_pretrained writes (config.json, generation_config.json,
model.safetensors) and expected.json:
  prompt_ids     the prompt (llama2: BOS + the SentencePiece pieces of `prompt`)
  prompt         the prompt's text (llama2)
  greedy         HF generate(do_sample=False, use_cache=True) new tokens, no EOS (plain argmax)
  greedy_no_cache  the same with use_cache=False (HF against itself)
  greedy_stop_at_eos  with the model's generation_config: ends after an EOS id (lists kept)
  margins        top-1 minus top-2 logit at each greedy step
  last_logits    the prompt's last-position logits
  hf_prompt_ids  AutoTokenizer's ids for `prompt` where AutoTokenizer loads the directory
The weights are drawn with a larger spread than HF's init (std 0.5 for the matrices), so
the greedy margins are wide and a difference in tokens is a difference in the model, not
a rounding tie.
"""
import argparse
import json
import os
import shutil
import sys

import torch

NEW_TOKENS = 24
LLAMA2_PROMPT = "The license grants you the right to copy"


def configs(vocab_sp):
    from transformers import GPT2Config, LlamaConfig, Qwen2Config

    common = dict(hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                  max_position_embeddings=256, rms_norm_eps=1e-5)
    return {
        "gpt2": GPT2Config(vocab_size=320, n_positions=256, n_embd=64, n_layer=2, n_head=4, resid_pdrop=0.0,
                           embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=1),
        "llama3": LlamaConfig(vocab_size=320, num_key_value_heads=2, rope_theta=500000.0, tie_word_embeddings=False,
                              rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                            "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
                              bos_token_id=0, eos_token_id=[1, 2], **common),
        "qwen2": Qwen2Config(vocab_size=320, num_key_value_heads=2, rope_theta=1000000.0, tie_word_embeddings=True,
                             bos_token_id=0, eos_token_id=1, use_sliding_window=False, **common),
        "llama2": LlamaConfig(vocab_size=vocab_sp, num_key_value_heads=4, rope_theta=10000.0, tie_word_embeddings=False,
                              bos_token_id=1, eos_token_id=2, **common),
    }


def spread_weights(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)
            elif "bias" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            else:  # norm scales
                p.copy_(1.0 + torch.randn(p.shape, generator=g) * 0.1)


def greedy(model, ids, use_cache, stop_at_eos=False):
    """HF greedy generation. stop_at_eos=False: a GenerationConfig without EOS, so no
    logits processor touches the scores (min_new_tokens would mask the EOS ids) and every
    step is the plain argmax; True: the model's own generation_config (stops after an
    eos_token_id, which may be a list)."""
    from transformers import GenerationConfig

    if stop_at_eos:
        out = model.generate(torch.tensor([ids]), max_new_tokens=NEW_TOKENS, do_sample=False, use_cache=use_cache,
                             pad_token_id=0, output_scores=True, return_dict_in_generate=True)
    else:
        gc = GenerationConfig(max_new_tokens=NEW_TOKENS, do_sample=False, use_cache=use_cache, eos_token_id=None,
                              pad_token_id=0, output_scores=True, return_dict_in_generate=True)
        out = model.generate(torch.tensor([ids]), generation_config=gc)
    tokens = out.sequences[0, len(ids):].tolist()
    margins = []
    for s in out.scores:
        top = torch.topk(s[0].float(), 2).values
        margins.append(float(top[0] - top[1]))
    return tokens, margins


def make(name, cfg, out_dir, sp_model, sp_prompt_ids):
    import transformers
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, torch_dtype=torch.float32)
    spread_weights(model, {"gpt2": 1, "llama3": 2, "qwen2": 3, "llama2": 4}[name])
    model.eval()
    d = os.path.join(out_dir, name)
    shutil.rmtree(d, ignore_errors=True)
    model.save_pretrained(d, safe_serialization=True)
    rec = {"family": name, "transformers_version": transformers.__version__}
    if name == "llama2":
        shutil.copy(sp_model, os.path.join(d, "tokenizer.model"))
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump({"tokenizer_class": "LlamaTokenizer", "add_bos_token": True, "add_eos_token": False,
                       "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "legacy": True,
                       "model_max_length": 256}, f, indent=2)
        ids = sp_prompt_ids
        rec["prompt"] = LLAMA2_PROMPT
        try:
            from transformers import AutoTokenizer

            rec["hf_prompt_ids"] = AutoTokenizer.from_pretrained(d)(LLAMA2_PROMPT)["input_ids"]
        except Exception as e:  # recorded, not fatal: the SentencePiece ids above are the reference
            rec["hf_tokenizer_error"] = f"{type(e).__name__}: {e}"[:300]
    else:
        g = torch.Generator().manual_seed(7)
        ids = torch.randint(3, cfg.vocab_size, (11,), generator=g).tolist()
    rec["prompt_ids"] = ids
    with torch.no_grad():
        rec["last_logits"] = model(torch.tensor([ids])).logits[0, -1].tolist()
    rec["greedy"], rec["margins"] = greedy(model, ids, True)
    rec["greedy_no_cache"], _ = greedy(model, ids, False)
    rec["greedy_stop_at_eos"], _ = greedy(model, ids, True, stop_at_eos=True)
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump(rec, f)
    print(f"{name}: prompt {len(ids)} tokens, greedy {rec['greedy'][:8]}..., min margin {min(rec['margins']):.3g}, "
          f"cache == no cache: {rec['greedy'] == rec['greedy_no_cache']}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--sp-model", required=True)
    ap.add_argument("--sp-ids")
    a = ap.parse_args()
    try:
        import sentencepiece as spm

        sp = spm.SentencePieceProcessor(model_file=a.sp_model)
        vocab_sp, sp_ids = sp.get_piece_size(), [1] + sp.encode(LLAMA2_PROMPT)
    except ImportError:
        with open(a.sp_ids) as f:
            j = json.load(f)
        vocab_sp, sp_ids = j["vocab_size"], j["prompt_ids"]
    os.makedirs(a.out, exist_ok=True)
    for name, cfg in configs(vocab_sp).items():
        make(name, cfg, a.out, a.sp_model, sp_ids)


if __name__ == "__main__":
    sys.exit(main())
