#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_tokenizer (tests/fuzz/corpus/tokenizer/).

Each seed is a shrunken copy of a fixture in tests/fixtures/tokenizers (the
single characters, the first merges and the added tokens; ids unchanged),
then a NUL byte and a text to encode; a few seeds are broken files. Standard
library only; the output is committed.
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "fixtures", "tokenizers")
OUT = os.path.join(HERE, "corpus", "tokenizer")
TEXTS = ["Hello world, it's 2024!\n", "  caf\u00e9 \u4f60\u597d \U0001f980 <s>x</s>",
         "<|begin_of_text|>Hi<|eot_id|>\n\n123456 ok", "a <mask> b<sep>  [word] zzz",
         "\u2581x \u0085y\tz"]


def shrink(data, keep_merges=60):
    model = data["model"]
    merges = [m.split(" ") if isinstance(m, str) else m for m in model["merges"]][:keep_merges]
    keep = {t for t in model["vocab"] if len(t) == 1 or (t.startswith("<") and t.endswith(">"))}
    keep |= {a + b for a, b in merges}
    model["vocab"] = {t: i for t, i in model["vocab"].items() if t in keep}
    model["merges"] = [" ".join(m) for m in merges] if isinstance(
        data["model"]["merges"][0], str) else merges
    return data


def main():
    os.makedirs(OUT, exist_ok=True)
    names = sorted(n for n in os.listdir(FIXTURES)
                   if os.path.isdir(os.path.join(FIXTURES, n)))
    for i, name in enumerate(names):
        with open(os.path.join(FIXTURES, name, "tokenizer.json"), encoding="utf-8") as f:
            data = shrink(json.load(f))
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(text + b"\0" + TEXTS[i % len(TEXTS)].encode("utf-8"))
        with open(os.path.join(OUT, name + "_builtin_texts"), "wb") as f:
            f.write(text)
    broken = {
        "wordpiece": b'{"model": {"type": "WordPiece", "vocab": {"a": 0}}}',
        "no_merges": b'{"model": {"type": "BPE", "vocab": {"a": 0}}}',
        "truncated": b'{"model": {"type": "BPE", "vocab": {"a": 0}, "merg',
        "bad_regex": b'{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, '
                     b'"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(\\\\p{L"}, '
                     b'"behavior": "Isolated"}}\0aaa',
    }
    for name, data in broken.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
