"""Peer baseline: DeepSpeed on one GPU, HF models, bf16, synthetic tokens.

Runs without the launcher (single process). One JSON line per configuration:
tokens/s, step time, peak GPU memory, process RSS. Usage: deepspeed_step.py [names...]

zerotrain's copy of ../shared/peers/deepspeed_step.py (kept in the repository so that the
device calls carry it), with cases added for its benchmarks:
  cpu_adam_ds:N          DeepSpeedCPUAdam alone on N f32 parameters (e.g. cpu_adam_ds:1.56e9),
                         beside bench/cpu_optimizer_bench --numel N
  llama7b-z3-off-ac:L:B  llama-2-7b's shape with L layers, micro-batch B, T=1024, ZeRO-3 with
                         offload_param and offload_optimizer cpu, HF gradient checkpointing,
                         the model built under deepspeed.zero.Init (as users load big
                         models): the largest-model comparison of bench/offload.sh
"""
import gc, json, os, resource, sys, time
os.environ.setdefault("RANK", "0"); os.environ.setdefault("LOCAL_RANK", "0")
os.environ.setdefault("WORLD_SIZE", "1"); os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29517")
import psutil, torch, deepspeed
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

def gpt2(L, C, H): return lambda: GPT2LMHeadModel(GPT2Config(n_layer=L, n_embd=C, n_head=H, n_positions=1024, vocab_size=50257))
def llama(L, C, H, KV, F, V): return lambda: LlamaForCausalLM(LlamaConfig(num_hidden_layers=L, hidden_size=C, num_attention_heads=H, num_key_value_heads=KV, intermediate_size=F, vocab_size=V, max_position_embeddings=4096))

CASES = {
  "gpt2-z2":          (gpt2(12, 768, 12), 50257, 16, {"stage": 2}),
  "gpt2xl-z2-off":    (gpt2(48, 1600, 25), 50257, 8, {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True}}),
  "gpt2xl-z3-off":    (gpt2(48, 1600, 25), 50257, 8, {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": True}, "offload_param": {"device": "cpu", "pin_memory": True}}),
  "gpt2xl-z2":        (gpt2(48, 1600, 25), 50257, 8, {"stage": 2}),
}

def parse_case(name):
    """(make, vocab, B, zero, checkpointing, zero_init) of a fixed or parameterised case."""
    if name in CASES:
        return CASES[name] + (False, False)
    kind, _, args = name.partition(":")
    if kind == "llama7b-z3-off-ac":
        L, B = (int(a) for a in args.split(":"))
        zero = {"stage": 3, "offload_optimizer": {"device": "cpu", "pin_memory": True},
                "offload_param": {"device": "cpu", "pin_memory": True}}
        return llama(L, 4096, 32, 32, 11008, 32000), 32000, B, zero, True, True
    raise KeyError(name)

def run(name, steps=6, warmup=3):
    make, vocab, B, zero, checkpointing, zero_init = parse_case(name)
    if zero_init:  # big models: fewer steps, each takes seconds
        steps, warmup = 3, 1
    T = 1024
    torch.manual_seed(0)
    t_build = time.time()
    if zero_init:
        ds_cfg = {"train_micro_batch_size_per_gpu": B, "bf16": {"enabled": True}, "zero_optimization": zero}
        with deepspeed.zero.Init(config_dict_or_path=ds_cfg, dtype=torch.bfloat16):
            model = make()
    else:
        model = make()
    t_build = time.time() - t_build
    if checkpointing: model.gradient_checkpointing_enable()
    if getattr(model.config, "use_cache", None) is not None: model.config.use_cache = False
    n = sum(getattr(p, "ds_numel", p.numel()) for p in model.parameters())
    cfg = {"train_micro_batch_size_per_gpu": B, "gradient_accumulation_steps": 1,
           "bf16": {"enabled": True}, "gradient_clipping": 1.0,
           "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "weight_decay": 0.0}},
           "zero_optimization": zero, "steps_per_print": 100000}
    t_init = time.time()
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
    t_init = time.time() - t_init
    x = torch.randint(0, vocab, (B, T), device=engine.device)
    torch.cuda.reset_peak_memory_stats()
    for i in range(warmup + steps):
        if i == warmup:
            torch.cuda.synchronize(); t0 = time.time()
        loss = engine(input_ids=x, labels=x).loss
        engine.backward(loss); engine.step()
    torch.cuda.synchronize(); dt = (time.time() - t0) / steps
    print(json.dumps(dict(name=name, params=n, B=B, T=T, zero=zero, tok_s=round(B * T / dt), step_s=round(dt, 3),
                          peak_gib=round(torch.cuda.max_memory_allocated() / 2**30, 2),
                          rss_gib=round(psutil.Process().memory_info().rss / 2**30, 1),
                          max_rss_gib=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 1),
                          checkpointing=checkpointing, build_s=round(t_build, 1), init_s=round(t_init, 1),
                          loss=round(float(loss), 3))), flush=True)
    engine.destroy(); del engine, model; gc.collect(); torch.cuda.empty_cache()

def cpu_adam_ds(n, reps=4):
    """DeepSpeedCPUAdam alone (AdamW mode) on n f32 parameters: its seconds per step."""
    from deepspeed.ops.adam import DeepSpeedCPUAdam
    p = torch.nn.Parameter(torch.randn(n)); p.grad = torch.randn(n)
    opt = DeepSpeedCPUAdam([p], lr=1e-3, adamw_mode=True); opt.step()
    t = time.time()
    for _ in range(reps): opt.step()
    dt = (time.time() - t) / reps
    print(json.dumps(dict(name="cpu_adam_ds", params=n, threads=torch.get_num_threads(), step_s=round(dt, 4),
                          gb_s_at_28_bytes=round(28 * n / dt / 1e9, 1))), flush=True)
    del opt, p; gc.collect()

def cpu_adam(n=256 << 20, reps=5):
    """DeepSpeedCPUAdam against torch.optim.AdamW on the CPU, fp32, n parameters."""
    from deepspeed.ops.adam import DeepSpeedCPUAdam
    res = {"params": n, "threads": torch.get_num_threads()}
    for label, make in [("torch_adamw", lambda p: torch.optim.AdamW([p], lr=1e-3)),
                        ("torch_adamw_foreach", lambda p: torch.optim.AdamW([p], lr=1e-3, foreach=True)),
                        ("ds_cpu_adam", lambda p: DeepSpeedCPUAdam([p], lr=1e-3, adamw_mode=True))]:
        p = torch.nn.Parameter(torch.randn(n)); p.grad = torch.randn(n)
        opt = make(p); opt.step()
        t = time.time()
        for _ in range(reps): opt.step()
        res[label + "_s"] = round((time.time() - t) / reps, 4)
        del opt, p; gc.collect()
    res["ds_speedup"] = round(res["torch_adamw_s"] / res["ds_cpu_adam_s"], 2)
    print(json.dumps(dict(name="cpu_adam", **res)), flush=True)

if __name__ == "__main__":
    names = sys.argv[1:] or list(CASES) + ["cpu_adam"]
    for nm in names:
        try:
            if nm == "cpu_adam": cpu_adam()
            elif nm.startswith("cpu_adam_ds:"): cpu_adam_ds(int(float(nm.split(":")[1])))
            else: run(nm)
        except Exception as e:
            print(json.dumps(dict(name=nm, error=repr(e)[:400])), flush=True)
