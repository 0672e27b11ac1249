"""What transformers 5's AutoTokenizer makes of a saved model directory's tokenizer files,
rebuilt with PyPI tokenizers and sentencepiece (CI has no transformers):

    python3 hf_tokenizer_oracle.py MODEL_DIR TEXTS.json

TEXTS.json is a list of strings. Follows tokenizer_config.json as transformers 5 does for
the three classes zerotrain writes (transformers/tokenization_utils_tokenizers.py,
TokenizersBackend):
  PreTrainedTokenizerFast  tokenizer.json as it is; add_bos_token / add_eos_token, when
                           present, replace the post-processor with [bos] $A [eos]
  GPT2Tokenizer            vocab.json + merges.txt, ByteLevel (add_prefix_space), BOS
                           before the text when add_bos_token
  LlamaTokenizer           tokenizer.model with SentencePiece; BOS unless add_bos_token is
                           false, EOS when add_eos_token
A special token the config names must be in the vocabulary: transformers adds a missing one
as a new token with an id past the vocabulary (the model then fails with IndexError).
Prints {"class": ..., "ids": [[...] per text]} and exits 0; prints the problem and exits 1.
"""
import json
import os
import sys


def fail(msg):
    print(msg)
    sys.exit(1)


def main():
    d, texts_path = sys.argv[1], sys.argv[2]
    with open(texts_path, encoding="utf-8") as f:
        texts = json.load(f)
    cfg_path = os.path.join(d, "tokenizer_config.json")
    if not os.path.isfile(cfg_path):
        fail(f"{cfg_path}: missing (AutoTokenizer would pick the class from config.json's model_type)")
    with open(cfg_path, encoding="utf-8") as f:
        cfg = json.load(f)
    cls = (cfg.get("tokenizer_class") or "").replace("Fast", "") or "?"
    specials = {k: cfg.get(k) for k in ("bos_token", "eos_token", "unk_token", "pad_token")}
    specials = {k: (v["content"] if isinstance(v, dict) else v) for k, v in specials.items() if v is not None}

    if cls in ("PreTrainedTokenizer", "TokenizersBackend", "GPT2Tokenizer"):
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

        if cls == "GPT2Tokenizer":
            tok = Tokenizer(models.BPE.from_file(os.path.join(d, "vocab.json"), os.path.join(d, "merges.txt")))
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=cfg.get("add_prefix_space", False))
            tok.decoder = decoders.ByteLevel()
        else:
            tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        ids_of = {}
        for key, t in specials.items():
            i = tok.token_to_id(t)
            if i is None:
                fail(f"{cfg_path}: {key} {t!r} is not in the vocabulary (HF would add it past the vocabulary)")
            ids_of[key] = i
        from tokenizers import AddedToken

        tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials.values()])
        explicit = "add_bos_token" in cfg or "add_eos_token" in cfg
        if cls == "GPT2Tokenizer" or explicit or tok.post_processor is None:
            bos, eos = cfg.get("add_bos_token", False), cfg.get("add_eos_token", False)
            single = (f"{specials['bos_token']}:0 " if bos else "") + "$A:0" + (f" {specials['eos_token']}:0" if eos else "")
            st = ([(specials["bos_token"], ids_of["bos_token"])] if bos else []) + (
                [(specials["eos_token"], ids_of["eos_token"])] if eos else [])
            tok.post_processor = processors.TemplateProcessing(single=single, pair=single + " $B:1", special_tokens=st)
        ids = [tok.encode(t).ids for t in texts]
    elif cls == "LlamaTokenizer":
        import sentencepiece as spm

        sp = spm.SentencePieceProcessor(model_file=os.path.join(d, "tokenizer.model"))
        for key, t in specials.items():
            if sp.piece_to_id(t) == sp.unk_id() and t != sp.id_to_piece(sp.unk_id()):
                fail(f"{cfg_path}: {key} {t!r} is not a piece of tokenizer.model")
        pre = [sp.bos_id()] if cfg.get("add_bos_token", True) else []
        post = [sp.eos_id()] if cfg.get("add_eos_token", False) else []
        ids = [pre + sp.encode(t) + post for t in texts]
    else:
        fail(f"{cfg_path}: tokenizer_class {cfg.get('tokenizer_class')!r} is not one this oracle rebuilds")

    with open(os.path.join(d, "config.json"), encoding="utf-8") as f:
        vocab = json.load(f)["vocab_size"]
    for i in (i for row in ids for i in row):
        if i >= vocab:
            fail(f"{d}: id {i} is past the model's vocab_size {vocab}")
    print(json.dumps({"class": cls, "ids": ids}))


if __name__ == "__main__":
    main()
