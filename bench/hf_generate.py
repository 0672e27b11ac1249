"""HF `generate` beside `zerotrain generate --device cuda` (bench/gpu_generate.sh runs both).

  python3 bench/hf_generate.py make DIR [--preset llama-3.2-1b]   random weights, bf16 safetensors
  python3 bench/hf_generate.py time DIR --prompt TEXT --new N [--dtype bf16|f32]
      greedy, KV cache (HF's default DynamicCache), prompt = the text's bytes as token ids
      (zerotrain's --tokenizer bytes); prints one JSON line with tokens/s over the whole
      generate call (prefill + N new tokens), after one short warm-up call.
"""
import argparse
import json
import time

import torch

PRESETS = {
    # Llama-3.2-1B's shape (config.json of meta-llama/Llama-3.2-1B).
    "llama-3.2-1b": dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072,
                         rope_theta=500000.0, tie_word_embeddings=True, rms_norm_eps=1e-5,
                         rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                         bos_token_id=128000, eos_token_id=128001),
}


def make(a):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**PRESETS[a.preset])
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(a.dir, safe_serialization=True)
    print(json.dumps({"made": a.dir, "params": sum(p.numel() for p in model.parameters())}))


def time_generate(a):
    from transformers import AutoModelForCausalLM

    dtype = {"bf16": torch.bfloat16, "f32": torch.float32}[a.dtype]
    model = AutoModelForCausalLM.from_pretrained(a.dir, torch_dtype=dtype).to("cuda").eval()
    ids = torch.tensor([list(a.prompt.encode("utf-8"))], device="cuda")
    kw = dict(do_sample=False, pad_token_id=0, eos_token_id=None)
    with torch.no_grad():
        model.generate(ids, max_new_tokens=8, min_new_tokens=8, **kw)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = model.generate(ids, max_new_tokens=a.new, min_new_tokens=a.new, **kw)
        torch.cuda.synchronize()
        secs = time.perf_counter() - t0
    n = out.shape[1] - ids.shape[1]
    print(json.dumps({"runner": f"hf-{a.dtype}", "new_tokens": n, "seconds": round(secs, 3),
                      "tokens_per_s": round(n / secs, 1), "prompt_tokens": ids.shape[1]}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["make", "time"])
    ap.add_argument("dir")
    ap.add_argument("--preset", default="llama-3.2-1b", choices=sorted(PRESETS))
    ap.add_argument("--prompt", default="")
    ap.add_argument("--new", type=int, default=256)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
    a = ap.parse_args()
    make(a) if a.what == "make" else time_generate(a)


if __name__ == "__main__":
    main()
