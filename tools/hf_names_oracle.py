"""Checks a saved model directory against what transformers expects, without transformers.

    python3 hf_names_oracle.py MODEL_DIR [MODEL_DIR ...]

From config.json it lists the state-dict names and shapes that GPT2LMHeadModel /
LlamaForCausalLM (also mistral, qwen2) save with safetensors (tied lm_head dropped,
GPT-2's non-persistent attn.bias buffers absent), then opens the weights with PyPI
safetensors (model.safetensors, or the shards of model.safetensors.index.json) and checks:
every expected tensor present once with the expected shape, nothing else, all in the
config's torch_dtype; the index's weight_map names exactly the file holding each tensor and
its metadata.total_size equals the tensors' bytes; generation_config.json carries the
config's bos/eos ids. Prints what differs and exits 1; exits 0 with "ok N tensors".
"""
import json
import os
import sys

from safetensors import safe_open

DTYPE_BYTES = {"F32": 4, "BF16": 2, "F16": 2}
TORCH_DTYPES = {"float32": "F32", "bfloat16": "BF16", "float16": "F16"}


def expected_gpt2(c):
    C = c["n_embd"]
    F = c.get("n_inner") or 4 * C
    V, P = c["vocab_size"], c["n_positions"]
    names = {"transformer.wte.weight": [V, C], "transformer.wpe.weight": [P, C]}
    for i in range(c["n_layer"]):
        p = f"transformer.h.{i}."
        names.update({
            p + "ln_1.weight": [C], p + "ln_1.bias": [C],
            p + "attn.c_attn.weight": [C, 3 * C], p + "attn.c_attn.bias": [3 * C],
            p + "attn.c_proj.weight": [C, C], p + "attn.c_proj.bias": [C],
            p + "ln_2.weight": [C], p + "ln_2.bias": [C],
            p + "mlp.c_fc.weight": [C, F], p + "mlp.c_fc.bias": [F],
            p + "mlp.c_proj.weight": [F, C], p + "mlp.c_proj.bias": [C],
        })
    names["transformer.ln_f.weight"] = [C]
    names["transformer.ln_f.bias"] = [C]
    if not c.get("tie_word_embeddings", True):
        names["lm_head.weight"] = [V, C]
    return names


def expected_llama(c):
    C, F, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    H = c["num_attention_heads"]
    KV = c.get("num_key_value_heads") or H
    D = c.get("head_dim") or C // H
    qwen2 = c["model_type"] == "qwen2"
    qkv_bias = True if qwen2 else c.get("attention_bias", False)
    o_bias = False if qwen2 else c.get("attention_bias", False)
    mlp_bias = False if qwen2 else c.get("mlp_bias", False)
    names = {"model.embed_tokens.weight": [V, C]}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        names[p + "input_layernorm.weight"] = [C]
        names[p + "post_attention_layernorm.weight"] = [C]
        for proj, rows in (("q_proj", H * D), ("k_proj", KV * D), ("v_proj", KV * D)):
            names[p + f"self_attn.{proj}.weight"] = [rows, C]
            if qkv_bias:
                names[p + f"self_attn.{proj}.bias"] = [rows]
        names[p + "self_attn.o_proj.weight"] = [C, H * D]
        if o_bias:
            names[p + "self_attn.o_proj.bias"] = [C]
        for proj, shape, bias in (("gate_proj", [F, C], F), ("up_proj", [F, C], F), ("down_proj", [C, F], C)):
            names[p + f"mlp.{proj}.weight"] = shape
            if mlp_bias:
                names[p + f"mlp.{proj}.bias"] = [bias]
    names["model.norm.weight"] = [C]
    if not c.get("tie_word_embeddings", False):
        names["lm_head.weight"] = [V, C]
    return names


def main(model_dir):
    problems = []
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    mt = config.get("model_type")
    if mt == "gpt2":
        expected = expected_gpt2(config)
        arch = "GPT2LMHeadModel"
    elif mt in ("llama", "mistral", "qwen2"):
        expected = expected_llama(config)
        arch = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM"}[mt]
    else:
        print(f"unknown model_type {mt!r}")
        return 1
    if config.get("architectures") != [arch]:
        problems.append(f"architectures {config.get('architectures')} != [{arch!r}]")
    want_dtype = TORCH_DTYPES.get(config.get("torch_dtype"))
    if want_dtype is None:
        problems.append(f"torch_dtype {config.get('torch_dtype')!r} is not float32/bfloat16/float16")

    index_path = os.path.join(model_dir, "model.safetensors.index.json")
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(index_path):
        with open(index_path) as f:
            index = json.load(f)
        weight_map = index["weight_map"]
        files = sorted(set(weight_map.values()))
        if os.path.exists(single):
            problems.append("both model.safetensors and an index are present")
        n = len(files)
        want_files = [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)]
        if files != want_files:
            problems.append(f"shard files {files} != {want_files}")
    else:
        weight_map = None
        files = ["model.safetensors"]

    found = {}
    total = 0
    for fname in files:
        with safe_open(os.path.join(model_dir, fname), framework="numpy") as f:
            if (f.metadata() or {}).get("format") != "pt":
                problems.append(f"{fname}: metadata format != 'pt' (transformers refuses to load it)")
            for name in f.keys():
                sl = f.get_slice(name)
                dtype, shape = sl.get_dtype(), list(sl.get_shape())
                if name in found:
                    problems.append(f"{name} appears in {found[name][2]} and {fname}")
                found[name] = (dtype, shape, fname)
                size = DTYPE_BYTES.get(dtype, 0)
                for s in shape:
                    size *= s
                total += size
                if weight_map is not None and weight_map.get(name) != fname:
                    problems.append(f"weight_map[{name}] = {weight_map.get(name)} but it is in {fname}")
    if weight_map is not None:
        if set(weight_map) != set(found):
            problems.append(f"weight_map names differ from the files' tensors: "
                            f"{sorted(set(weight_map) ^ set(found))[:5]}")
        if index.get("metadata", {}).get("total_size") != total:
            problems.append(f"metadata.total_size {index.get('metadata', {}).get('total_size')} != {total}")

    for name, shape in expected.items():
        if name not in found:
            problems.append(f"missing {name} {shape}")
        elif found[name][1] != shape:
            problems.append(f"{name}: shape {found[name][1]} != expected {shape}")
        elif want_dtype and found[name][0] != want_dtype:
            problems.append(f"{name}: dtype {found[name][0]} != torch_dtype {want_dtype}")
    for name in found:
        if name not in expected:
            problems.append(f"unexpected tensor {name}")

    gen_path = os.path.join(model_dir, "generation_config.json")
    with open(gen_path) as f:
        gen = json.load(f)
    for key in ("bos_token_id", "eos_token_id"):
        if config.get(key) is not None and gen.get(key) != config.get(key):
            problems.append(f"generation_config {key} {gen.get(key)} != config {config.get(key)}")

    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"ok {len(found)} tensors in {len(files)} file(s)")
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.stderr.write(__doc__)
        sys.exit(2)
    failed = 0
    for d in sys.argv[1:]:
        print(f"{d}:")
        failed |= main(d)
    sys.exit(failed)
