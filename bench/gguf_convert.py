#!/usr/bin/env python3
"""llama.cpp's convert_hf_to_gguf.py for bench/serve_bench.py's random models.

    python3 bench/gguf_convert.py LLAMA_CPP_DIR MODEL_DIR --outfile F --outtype bf16

Runs the converter of the llama.cpp checkout LLAMA_CPP_DIR (its own code,
its own gguf-py) with one change: a BPE tokenizer whose pre-tokenizer the
converter does not recognise by its hash is written as "gpt-2". The random
models carry the test fixture's GPT-2 byte-level BPE tokenizer (a 1,001-id
cut of GPT-2's, so its hash is no published model's), and GPT-2's
pre-tokenizer is the right one for it; llama-batched-bench, the peer that
reads the file, never tokenizes text anyway. And a model folder without a
tokenizer.model skips the SentencePiece attempt as the converter would when
the sentencepiece package is installed (it imports the package before
looking for the file). Any other converter error is left as it is.
"""
import os
import runpy
import sys


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: gguf_convert.py LLAMA_CPP_DIR MODEL_DIR [converter options]")
    src = os.path.abspath(sys.argv[1])
    script = os.path.join(src, "convert_hf_to_gguf.py")
    if not os.path.isfile(script):
        sys.exit(f"gguf_convert.py: {script} is missing: LLAMA_CPP_DIR must be a llama.cpp "
                 "source folder")
    sys.path.insert(0, os.path.join(src, "gguf-py"))
    sys.path.insert(0, src)
    try:  # newer checkouts keep the model classes in conversion/
        import conversion.base as base
    except ImportError:  # older ones in the script itself: patched after loading it
        base = None

    def patch(cls):
        original = cls.get_vocab_base_pre

        def get_vocab_base_pre(self, tokenizer):
            try:
                return original(self, tokenizer)
            except NotImplementedError:
                print("gguf_convert.py: unrecognised BPE pre-tokenizer written as gpt-2",
                      file=sys.stderr)
                return "gpt-2"
        cls.get_vocab_base_pre = get_vocab_base_pre
        sentencepiece = getattr(cls, "_create_vocab_sentencepiece", None)
        if sentencepiece is not None:
            def _create_vocab_sentencepiece(self):
                if not (self.dir_model / "tokenizer.model").is_file():
                    raise FileNotFoundError(f"File not found: {self.dir_model / 'tokenizer.model'}")
                return sentencepiece(self)
            cls._create_vocab_sentencepiece = _create_vocab_sentencepiece

    if base is not None:
        patch(base.TextModel)
        sys.argv = [script] + sys.argv[2:]
        runpy.run_path(script, run_name="__main__")
        return
    # Loaded under another name, its main() does not run yet; a script
    # without TextModel and main() has done its work at the top level.
    sys.argv = [script] + sys.argv[2:]
    namespace = runpy.run_path(script, run_name="gguf_convert")
    if "TextModel" in namespace and "main" in namespace:
        patch(namespace["TextModel"])
        namespace["main"]()


if __name__ == "__main__":
    main()
