#!/usr/bin/env python3
"""Oracle for the tokenizer parity tests (tests/e2e/tokenizer_parity_test.cpp): builds
tokenizers with PyPI `tokenizers` / `sentencepiece`, writes a varied corpus, and encodes
it with the reference libraries.

  tokenizer_oracle.py prepare DIR      corpus + reference tokenizers + expected ids
  tokenizer_oracle.py encode TOKENIZER_JSON CORPUS OUT_JSON
  tokenizer_oracle.py bench VOCAB_DIR CORPUS THREADS   (prints MB/s of encode_batch)

Corpus file format: per document, the byte length in ASCII, '\\n', then the raw bytes
(documents may hold invalid UTF-8). Python gets each document as
bytes.decode("utf-8", errors="replace"): zerotrain replaces invalid UTF-8 the same way.
"""
import json
import os
import random
import sys

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def corpus_documents():
    rng = random.Random(1234)
    fixed = [
        "Hello world! This is a test of the tokenizer.",
        "It's, they're, we've, I'm, you'll, he'd — IT'S THEY'RE WE'VE I'M YOU'LL HE'D 'S",
        "def f(x):\n    return x ** 2  # square\n\n\nclass A:\n\tpass\n",
        "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }\r\n",
        "Numbers: 1 12 123 1234 12345 123456789012345678901234567890 3.14159 1e-10 -42",
        "Unicode letters: café naïve Ünïcödé ß Ωμέγα кириллица עברית العربية हिन्दी",
        "Unicode digits: ٠١٢٣٤٥٦٧٨٩ ०१२३ ¹²³ ½ Ⅻ 一二三 ①②",
        "CJK: 日本語のテキストです。中文文本。한국어 텍스트입니다.",
        "Emoji: 🎉🚀👍🏽 👨‍👩‍👧‍👦 ❤️ 🇫🇷 ☃",
        "   leading spaces and trailing spaces   ",
        "tabs\tand\t\ttabs\t\t\tand   mixed \t \n \n\n\nnewlines\r\n\r\nCRLF  ",
        "trailing newline\n",
        "  \n  \t  ",
        " ",
        "",
        "a",
        "Non-breaking\u00a0space, ideographic\u3000space, thin\u2009space, nel\u0085end",
        "Special tokens inline: <|end_of_text|> and <|begin_of_text|>text<|eot_id|>",
        "Mask: a <|mask|>   b and <|mask|>c; foo is single, foobar is not, (foo) is.",
        "<|endoftext|>GPT-2 document separator<|endoftext|>",
        "Punctuation!!! ??? ... --- ((( ))) [[[ ]]] {{{ }}} @#$%^&*_+=|\\/<>~`",
        "URL: https://example.com/path?query=1&x=y#frag email: a.b@c.de",
        "'s'S 't'T 're'RE 've'VE 'm'M 'll'LL 'd'D ''s '''",
        "Combining: e\u0301 a\u0308 n\u0303; zero width\u200bspace; bidi \u202eoverride\u202c",
    ]
    docs = [s.encode("utf-8") for s in fixed]
    # Invalid UTF-8: lone continuation, truncated sequences, overlong, surrogates, 0xFF.
    docs += [b"bad \xff byte", b"trunc \xe2\x82 end", b"\xc0\xaf overlong", b"surrogate \xed\xa0\x80 x",
             b"\x80\x80\x80", b"end truncated \xf0\x9f\x8e", b"mixed \xe6\x97\xa5\xe6 ok \xf4\x90\x80\x80"]
    words = ["the", "model", "training", "token", "zero", "shard", "gradient", "optimizer", "état",
             "Straße", "日本", "数据", "данные", "🙂", "x86_64", "C++17", "loss=0.123", "lr:3e-4"]
    alphabet = ("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \t\n.,;:'\"!?()-"
                "éüñçøåЖжΩλ中文字日本ア한😀🎉€£¥\u00a0\u2003")
    for i in range(240):
        kind = i % 4
        if kind == 0:
            s = " ".join(rng.choice(words) for _ in range(rng.randint(1, 40)))
        elif kind == 1:
            s = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 120)))
        elif kind == 2:
            s = " ".join(str(rng.randint(0, 10 ** rng.randint(1, 15))) for _ in range(rng.randint(1, 10)))
        else:
            s = "\n".join(" " * rng.randint(0, 6) + " ".join(rng.choice(words) for _ in range(rng.randint(0, 8)))
                          + " " * rng.randint(0, 3) for _ in range(rng.randint(1, 6)))
        docs.append(s.encode("utf-8"))
    return docs


def write_corpus(path, docs):
    with open(path, "wb") as f:
        for d in docs:
            f.write(str(len(d)).encode() + b"\n" + d)


def read_corpus(path):
    data = open(path, "rb").read()
    docs, pos = [], 0
    while pos < len(data):
        nl = data.index(b"\n", pos)
        n = int(data[pos:nl])
        docs.append(data[nl + 1:nl + 1 + n])
        pos = nl + 1 + n
    return docs


def as_text(b):
    return b.decode("utf-8", errors="replace")


def hf_expected(tok, docs):
    texts = [as_text(d) for d in docs]
    plain = [tok.encode(t, add_special_tokens=False).ids for t in texts]
    return {
        "plain": plain,
        "special": [tok.encode(t, add_special_tokens=True).ids for t in texts],
        "whole": tok.encode("".join(texts), add_special_tokens=False).ids,
        "decoded": [tok.decode(ids, skip_special_tokens=False) for ids in plain],
        "decoded_skip": [tok.decode(ids, skip_special_tokens=True) for ids in plain],
    }


def build_llama3(out_dir, docs):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|reserved_special_token_0|>"]
    trainer = trainers.BpeTrainer(vocab_size=900, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    text = [as_text(d) for d in docs] * 3
    tok.train_from_iterator(text, trainer)
    tok.add_special_tokens([AddedToken("<|mask|>", lstrip=True, rstrip=True, special=True, normalized=False)])
    tok.add_tokens([AddedToken("foo", single_word=True, special=False, normalized=False)])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A $B",
                                                       special_tokens=[("<|begin_of_text|>", bos)])
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "tokenizer.json")
    tok.save(path)
    j = json.load(open(path))
    j["model"]["ignore_merges"] = True
    json.dump(j, open(path, "w"), ensure_ascii=False)
    return Tokenizer.from_file(path)


def legacy_merges_copy(src, out_dir):
    """The same tokenizer.json with merges spelled "a b" (tokenizers < 0.20)."""
    from tokenizers import Tokenizer
    j = json.load(open(src))
    j["model"]["merges"] = [" ".join(m) for m in j["model"]["merges"]]
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "tokenizer.json")
    json.dump(j, open(path, "w"), ensure_ascii=False)
    return Tokenizer.from_file(path)


def gpt2_tokenizer(vocab_dir):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    tok = Tokenizer(models.BPE.from_file(os.path.join(vocab_dir, "vocab.json"), os.path.join(vocab_dir, "merges.txt")))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>"])
    return tok


def build_sentencepiece(out_dir, docs):
    import sentencepiece as spm
    os.makedirs(out_dir, exist_ok=True)
    train_txt = os.path.join(out_dir, "train.txt")
    rng = random.Random(7)
    with open(train_txt, "w") as f:
        for d in docs:
            f.write(as_text(d).replace("\r", " ").replace("\n", " ") + "\n")
        for _ in range(300):
            f.write(" ".join(rng.choice(["alpha", "beta", "gamma", "delta", "zero", "shard", "模型", "данные"])
                             for _ in range(12)) + "\n")
    prefix = os.path.join(out_dir, "tokenizer")
    spm.SentencePieceTrainer.train(input=train_txt, model_prefix=prefix, vocab_size=600, model_type="bpe",
                                   byte_fallback=True, character_coverage=0.98, bos_id=1, eos_id=2, unk_id=0,
                                   num_threads=1, minloglevel=2)
    return spm.SentencePieceProcessor(model_file=prefix + ".model")


def sp_expected(sp, docs):
    texts = [as_text(d) for d in docs]
    plain = [sp.encode(t) for t in texts]
    return {
        "plain": plain,
        "special": [[sp.bos_id()] + ids for ids in plain],
        "whole": sp.encode("".join(texts)),
        "decoded": [sp.decode(ids) for ids in plain],
        "decoded_skip": [sp.decode(ids) for ids in plain],
    }


def prepare(d):
    os.makedirs(d, exist_ok=True)
    docs = corpus_documents()
    corpus = os.path.join(d, "corpus.bin")
    write_corpus(corpus, docs)
    gpt2_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "gpt2")
    gpt2 = gpt2_tokenizer(gpt2_dir)
    os.makedirs(os.path.join(d, "gpt2_json"), exist_ok=True)
    gpt2.save(os.path.join(d, "gpt2_json", "tokenizer.json"))
    expected = {"gpt2": hf_expected(gpt2, docs)}
    # add_prefix_space (RoBERTa-style) and a template with a suffix.
    from tokenizers import pre_tokenizers, processors
    gpt2.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    gpt2.post_processor = processors.TemplateProcessing(
        single="<|endoftext|> $A <|endoftext|>", special_tokens=[("<|endoftext|>", 50256)])
    os.makedirs(os.path.join(d, "gpt2_prefix"), exist_ok=True)
    gpt2.save(os.path.join(d, "gpt2_prefix", "tokenizer.json"))
    expected["gpt2_prefix"] = hf_expected(gpt2, docs)
    llama3 = build_llama3(os.path.join(d, "llama3"), docs)
    expected["llama3"] = hf_expected(llama3, docs)
    legacy = legacy_merges_copy(os.path.join(d, "llama3", "tokenizer.json"), os.path.join(d, "llama3_legacy"))
    expected["llama3_legacy"] = hf_expected(legacy, docs)
    sp = build_sentencepiece(os.path.join(d, "sp"), docs)
    expected["sp"] = sp_expected(sp, docs)
    with open(os.path.join(d, "expected.json"), "w") as f:
        json.dump(expected, f, ensure_ascii=False)


def encode(tokenizer_json, corpus, out):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tokenizer_json)
    with open(out, "w") as f:
        json.dump(hf_expected(tok, read_corpus(corpus)), f, ensure_ascii=False)


def bench(vocab_dir, corpus, threads):
    import time
    os.environ["RAYON_NUM_THREADS"] = threads
    tok = gpt2_tokenizer(vocab_dir)
    docs = [as_text(d) for d in read_corpus(corpus)]
    nbytes = sum(len(d.encode()) for d in docs)
    tok.encode_batch(docs[:50])
    t0 = time.perf_counter()
    tok.encode_batch(docs, add_special_tokens=False)
    print(nbytes / (time.perf_counter() - t0) / 1e6)


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "prepare" and len(sys.argv) == 3:
        prepare(sys.argv[2])
    elif cmd == "encode" and len(sys.argv) == 5:
        encode(*sys.argv[2:5])
    elif cmd == "bench" and len(sys.argv) == 5:
        bench(*sys.argv[2:5])
    else:
        sys.exit(__doc__)
