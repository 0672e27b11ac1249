"""What tools/hf_load_check.py and tools/peft_load_check.py share: running the zerotrain
binary, training tiny models on the CPU, reading the logits `zerotrain eval --dump-logits`
wrote, comparing logits with a tolerance and printing one line per case; with the PEFT
fixture tools (make_peft_fixtures.py, make_peft_grad_fixtures.py) also reading the tiny HF
bases and picking the cases named on the command line.

Not a script: both checks put tools/ first on sys.path and import it from there.
`python3 tools/X.py` alone would put tools/ on the path, but `python3 -P` (or PYTHONSAFEPATH)
and loading a check by another way (runpy, importlib) do not. Only the standard library at
import time; the rest is imported where used, so that --help needs nothing more and
hf_load_check's --skip-hf only safetensors and numpy (no torch, no transformers).
"""
import argparse
import json
import os
import shutil
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# every case trains on these (two of the repo's licenses, 17 KB): small enough for a few CPU steps
DATA = [os.path.join(ROOT, "data/text/artistic.txt"), os.path.join(ROOT, "data/text/apache-2.0.txt")]
# the texts whose logits both checks compare: words, a long sentence, digits and symbols,
# leading space and newline (hf_load_check adds non-ASCII text for its tokenizer cases)
CHECK_TEXTS = [
    "Hello world",
    "The license grants you the right to copy, modify and distribute the Package.",
    "Numbers 12345 and 3.14159; symbols $%&!",
    " a leading space, and\na newline",
]


def run(cmd, **kw):
    """Runs cmd; returns its stdout and stderr together. A nonzero exit raises with the output's
    tail, which the checks print as the case's failure."""
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout[-3000:]}")
    return r.stdout


def q(s):
    return json.dumps(s)  # a double-quoted JSON string is a YAML string


def train_tokenizer(zt, work, name, vocab_size):
    """A byte-level BPE of vocab_size tokens trained on DATA (`zerotrain tokenizer train`);
    returns the path of its tokenizer.json."""
    tok = os.path.join(work, name + "_tokenizer.json")
    run([zt, "tokenizer", "train", "--vocab-size", str(vocab_size), "--out", tok] + DATA)
    return tok


def train(zt, work, name, model, max_steps, learning_rate, extra=""):
    """Trains case `name` for max_steps steps on DATA with `zerotrain train --device cpu`
    (sequences of 32, batches of 2, seed 3, no checkpoints); returns its final/.

    model: the YAML flow mapping of the model: key, e.g. {preset: tiny-llama};
    learning_rate: as written in the YAML (e.g. "1.0e-3");
    extra: further top-level YAML lines of the case (e.g. a lora: block), each ending in a newline.
    """
    out = os.path.join(work, name)
    yaml = os.path.join(work, name + ".yaml")
    with open(yaml, "w") as f:
        f.write(f"model: {model}\n{extra}"
                f"data:\n  train: [{', '.join(q(p) for p in DATA)}]\n  validation_fraction: 0.1\n  seq_len: 32\n"
                f"per_device_train_batch_size: 2\nmax_steps: {max_steps}\nlearning_rate: {learning_rate}\n"
                f"save_strategy: no\neval_interval: 0\nsteps_per_print: 1\nseed: 3\ndevice: cpu\n"
                f"output_dir: {q(out)}\noverwrite_output_dir: true\n")
    run([zt, "train", yaml])
    return os.path.join(out, "final")


def dump_logits(zt, work, name, texts, model_args):
    """Our f32 logits over texts (one document each): `zerotrain eval <model_args> --dump-logits`
    on the CPU. Returns one (ids, logits) per text: the token ids eval fed the model (a list of
    ints, specials included) and the [len(ids), vocab] numpy logits at every position.

    model_args: what eval loads, e.g. ["--model", final] or ["--model", base, "--adapter", final,
    "--tokenizer", final].
    """
    docs = os.path.join(work, name + "_texts.jsonl")
    with open(docs, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(json.dumps({"text": t}) + "\n")
    path = os.path.join(work, name + "_logits.safetensors")
    run([zt, "eval"] + model_args + ["--data", docs, "--dump-logits", path, "--device", "cpu"])
    from safetensors.numpy import load_file  # here, not at the top: see the module's docstring

    dumped = load_file(path)
    return [([int(x) for x in dumped[f"input_ids.{i}"]], dumped[f"logits.{i}"]) for i in range(len(texts))]


def causal_lm_f32(model_dir, **kw):
    """transformers' AutoModelForCausalLM from model_dir in float32 (the precision of our dumped
    logits), in eval mode; kw go to from_pretrained (e.g. config=)."""
    import torch
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, **kw)
    except TypeError:  # transformers 4.x spells it torch_dtype
        model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, **kw)
    return model.eval()


def hf_base_f32(base_dir):
    """A tiny base of tests/data/hf in float32, as the installed transformers should read it.
    tests/data/hf was saved by transformers 5.x, whose config.json has rope_parameters; 4.x
    ignores that key (it would run RoPE with theta 10000 and no llama3 scaling), so there it is
    given back as 4.x's rope_theta and rope_scaling."""
    import transformers
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(base_dir)
    if int(transformers.__version__.split(".")[0]) < 5:
        with open(os.path.join(base_dir, "config.json")) as f:
            rope = json.load(f).get("rope_parameters")
        if rope:
            config.rope_theta = rope["rope_theta"]
            scaling = {k: v for k, v in rope.items() if k != "rope_theta"}
            config.rope_scaling = scaling if scaling.get("rope_type", "default") != "default" else None
    return causal_lm_f32(base_dir, config=config)


def make_fixtures(cases, what, default_out, seed_base, make):
    """A fixture tool's main: `TOOL [OUT_DIR] [NAME ...]` makes the cases named (every one when
    none is) with make(out_dir, name, family, kwargs, seed); the seed is seed_base plus the
    case's place in cases, so that remaking one case gives the bytes it had when all were made.
    Exits naming the unknown ones."""
    import sys

    out_dir = sys.argv[1] if len(sys.argv) > 1 else default_out
    names = sys.argv[2:]
    unknown = sorted(set(names) - set(cases))
    if unknown:
        sys.exit(f"unknown {what}(s) {unknown}; the {what}s are {list(cases)}")
    os.makedirs(out_dir, exist_ok=True)
    for i, (name, (family, kwargs)) in enumerate(cases.items()):
        if not names or name in names:
            make(out_dir, name, family, kwargs, seed=seed_base + i)


def logits_diff(ref, other):
    """(max |ref - other|, scale) with scale = max(1, max |ref|). The checks' tolerances are
    relative to the scale because f32 rounding grows with the logits' size; the max with 1
    keeps logits near 0 from being held to less than atol itself."""
    return float(abs(ref - other).max()), max(1.0, float(abs(ref).max()))


def parser(doc, default_work):
    """The command line both checks take: the binary, --work, --only and --atol."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("zerotrain", help="path of the zerotrain binary")
    ap.add_argument("--work", default=default_work, help="scratch directory (emptied first)")
    ap.add_argument("--only", default="", help="comma-separated cases (default: all)")
    ap.add_argument("--atol", type=float, default=1e-5)
    return ap


def chosen_cases(ap, only, cases):
    """The names --only picks from cases (all of them when empty), in the order given; an
    unknown name is a usage error (exit 2)."""
    names = [n for n in only.split(",") if n] or list(cases)
    unknown = [n for n in names if n not in cases]
    if unknown:
        ap.error(f"unknown case(s) {unknown}; cases: {', '.join(cases)}")
    return names


def empty_dir(path):
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)


def run_cases(names, check):
    """Prints one line per case: "name: ok (summary)", or "name: FAIL (summary)" followed by its
    problems, one an indented line. check(name) returns (problems, summary); an exception is
    the case's one problem, so that one case's failure does not hide the others. Returns the
    number of cases that failed."""
    failed = 0
    for name in names:
        try:
            bad, summary = check(name)
        except Exception as e:
            bad, summary = [f"{type(e).__name__}: {e}"], "error"
        if bad:
            failed += 1
            print(f"{name}: FAIL ({summary})", flush=True)
            for p in bad:
                print(f"    {p}", flush=True)
        else:
            print(f"{name}: ok ({summary})", flush=True)
    return failed
