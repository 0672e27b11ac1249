"""Peer baseline for issue 20: HF Transformers + PEFT LoRA fine-tuning on one GPU.

As HF Trainer runs it with `bf16=True`: the base model in bf16 (random weights from the
config: the speed does not depend on them), SDPA attention, no torch.compile (eager),
PEFT's f32 adapters (get_peft_model's autocast_adapter_dtype), the step under
torch.autocast(bfloat16), fused AdamW over the adapters, synthetic tokens, labels = inputs
(HF's shifted causal-LM loss). LoRA r=16, alpha 32, dropout 0, on q/k/v/o/gate/up/down.

    python3 bench/peers/peft_lora_step.py CASE [CASE ...]

CASE is SHAPE:B[:ac] with SHAPE llama1b (Llama-3.2-1B: hidden 2048, 16 layers, 32 heads,
8 KV heads, FFN 8192, vocab 128256, tied embeddings) or llama8b (Llama-3-8B: hidden 4096,
32 layers, 32/8 heads, FFN 14336, vocab 128256), micro-batch B, `ac` for gradient
checkpointing (non-reentrant). T = 2048 (ZT_PEFT_SEQ to change). One JSON line per case:
tokens/s over the timed steps, ms/step, peak GPU memory (torch's max_memory_allocated and
max_memory_reserved), trainable and total parameter counts, the loss.
"""
import json, os, sys, time

import torch
import peft
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

SHAPES = {
    "llama1b": dict(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8,
                    intermediate_size=8192, vocab_size=128256, tie_word_embeddings=True),
    "llama8b": dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                    intermediate_size=14336, vocab_size=128256, tie_word_embeddings=False),
}
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def run(case, steps=10, warmup=3):
    shape, B, *rest = case.split(":")
    B = int(B)
    checkpointing = "ac" in rest
    T = int(os.environ.get("ZT_PEFT_SEQ", "2048"))
    torch.manual_seed(0)
    config = LlamaConfig(max_position_embeddings=max(T, 4096), rope_theta=500000.0, rms_norm_eps=1e-5,
                         attn_implementation="sdpa", use_cache=False, **SHAPES[shape])
    with torch.device("cuda"):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    lora = peft.LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=TARGETS, task_type="CAUSAL_LM")
    model = peft.get_peft_model(model, lora)  # autocast_adapter_dtype=True: adapters in f32
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert all(p.dtype == torch.float32 for p in trainable), "PEFT's adapters are expected in f32"
    opt = torch.optim.AdamW(trainable, lr=1e-4, weight_decay=0.0, fused=True)
    gen = torch.Generator(device="cuda").manual_seed(1)
    tokens = torch.randint(0, config.vocab_size, (B, T), device="cuda", generator=gen)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        loss = step()
    end.record()
    torch.cuda.synchronize()
    ms = start.elapsed_time(end) / steps
    result = {
        "peer": f"transformers {transformers.__version__} + peft {peft.__version__}, torch {torch.__version__}",
        "case": case, "B": B, "T": T, "gradient_checkpointing": checkpointing,
        "tokens_per_s": round(B * T / (ms / 1000.0), 1), "ms_per_step": round(ms, 2),
        "peak_allocated_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
        "peak_reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 2),
        "trainable_params": sum(p.numel() for p in trainable),
        "total_params": sum(p.numel() for p in model.parameters()),
        "loss": round(float(loss), 4),
    }
    print("RESULT " + json.dumps(result), flush=True)
    del model, opt
    torch.cuda.empty_cache()


if __name__ == "__main__":
    for c in sys.argv[1:] or ["llama1b:8"]:
        try:
            run(c)
        except torch.OutOfMemoryError as e:
            print("RESULT " + json.dumps({"case": c, "error": "out of memory: " + str(e)[:200]}), flush=True)
            torch.cuda.empty_cache()
