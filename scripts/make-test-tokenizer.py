#!/usr/bin/env python3
"""Writes the byte-level BPE fixture of the runtime's tokenizer tests.

  python3 scripts/make-test-tokenizer.py [OUT_DIR]   (default test/data/tokenizer)

Needs Hugging Face `tokenizers` (pip install tokenizers); CI does not run
this script, it reads the files it wrote, which are committed:

  tokenizer.json       a byte-level BPE (vocabulary about 300) trained on the
                       text below, with the Digits + ByteLevel pre-tokenizer of
                       SmolLM2 and the special token <|endoftext|>
  gpt2-tokenizer.json  GPT-2's single ByteLevel pre-tokenizer (its own
                       regex), merges in the [a, b] list form
  llama3-tokenizer.json  Llama 3's: a Split with its regex, ByteLevel without
                       one, ignore_merges
  split-tokenizer.json the other Split behaviours (MergedWithNext on a
                       String, MergedWithPrevious, Removed with invert,
                       Contiguous digits) and add_prefix_space
  expected.json        for each file, the ids `tokenizers` gives for a set of
                       strings (ASCII, accents, CJK, emoji, numerals, runs of
                       spaces and newlines, the special token, and random
                       mixtures of those) and, where they differ from the
                       text, its decodings with and without special tokens

test/runtime/TokenizerTest.cpp must reproduce these ids exactly.
"""
import json
import os
import random
import sys

from tokenizers import (Regex, Tokenizer, decoders, models, pre_tokenizers,
                        trainers)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(HERE), "test", "data", "tokenizer")

# A few KB of varied text: English prose, French, German, Japanese, digits,
# code and whitespace, so that merges of multibyte characters exist too.
TEXT = """\
The quick brown fox jumps over the lazy dog. The dog sleeps in the sun;
the fox runs into the forest, where the trees are tall and the air is cool.
It's what they'd said: we'll see, you're right, I've done it, I'm here.
Numbers: 12345 and 2024-11-28, 3.14159, 1000000 people, 42 answers.
Le café est très bon, mais l'été à Paris est chaud. Élève, où es-tu?
Übermäßig große Straßen führen über die Brücke. Schöne Grüße!
日本語のテキストです。東京は日本の首都です。今日はいい天気ですね。
Emoji: 🙂 😀 🚀 ❤️ 👍🏽 and symbols like € £ ¥ © ® ™ ± × ÷.
def main(args):
    for i in range(10):
        print("hello, world", i)
    return 0

    Indented lines, tabs\tand\ttabs, trailing spaces   
multiple


blank lines and   runs of    spaces.
"""
TEXT = TEXT * 8

STRINGS = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "It's what they'd said: we'll see, I've done it.",
    "café à l'été, Übermäßig große Straßen",
    "日本語のテキスト",
    "Emoji 🙂🚀 and 👍🏽!",
    "Numbers 12345 and 3.14159 and 2024",
    "  leading spaces, two\n\nnewlines,   three spaces  ",
    "tabs\tand\ttabs\n",
    "<|endoftext|>",
    "before<|endoftext|>after <|endoftext|> spaced",
    "x",
    "unseen: ѬѭѮ ψχω ﷽ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "   ",
    "\n",
    "Roman Ⅻ, ² and ½, Arabic ٣٤٥, fullwidth １２",
]

# Random strings from a soup of the pieces the pre-tokenizers treat
# specially (contractions, numerals of every kind, Unicode spaces, the
# special token and near misses), the same on every run.
SOUP = (list("abcdefghijklmnopqrstuvwxyzABCXYZ0123456789 \t\n\r'.,!?-_()\"")
        + ["  ", "   ", "\n\n", "'s", "'ll", "'RE", "é", "ß", "Ü", "日", "本",
           "の", "٣", "½", "²", "Ⅻ", "🙂", "👍🏽", "\u00a0", "\u2003",
           "\u200b", "<|endoftext|>", "<|endoftext", "ﬁ", "x", "q", "z"])
RANDOM_STRINGS = 25


LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|"
                  r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
                  r"\s+(?!\S)|\s+")


def build(pre, list_merges, ignore_merges=False):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, min_frequency=2, special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False)
    tok.train_from_iterator([TEXT], trainer=trainer)
    data = json.loads(tok.to_str())
    if not list_merges:
        data["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m
                                   for m in data["model"]["merges"]]
    else:
        data["model"]["merges"] = [m.split(" ") if isinstance(m, str) else m
                                   for m in data["model"]["merges"]]
    if ignore_merges:
        data["model"]["ignore_merges"] = True
    return Tokenizer.from_str(json.dumps(data)), data


def case(tok, text):
    """The ids of `text` and, where they differ from the text, its decodings
    with and without special tokens."""
    ids = tok.encode(text, add_special_tokens=False).ids
    out = {"text": text, "ids": ids}
    decoded = tok.decode(ids, skip_special_tokens=False)
    if decoded != text:
        out["decoded"] = decoded
    skipped = tok.decode(ids, skip_special_tokens=True)
    if skipped != decoded:
        out["decoded_skip_special"] = skipped
    return out


def main():
    os.makedirs(OUT, exist_ok=True)
    expected = {}
    variants = {
        # SmolLM2's pre-tokenizer: digits one by one, then GPT-2's regex.
        "tokenizer.json": (pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False,
                                     use_regex=True)]), False),
        # GPT-2's: the regex inside ByteLevel, merges as lists.
        "gpt2-tokenizer.json": (pre_tokenizers.ByteLevel(
            add_prefix_space=False, use_regex=True), True),
        "llama3-tokenizer.json": (pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PATTERN), "isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False,
                                     use_regex=False)]), False, True),
        "split-tokenizer.json": (pre_tokenizers.Sequence([
            pre_tokenizers.Split(" ", "merged_with_next"),
            pre_tokenizers.Split(Regex(r"\p{P}"), "merged_with_previous"),
            pre_tokenizers.Split(Regex(r"[^xqz]"), "removed",
                                 invert=True),
            pre_tokenizers.Digits(individual_digits=False),
            pre_tokenizers.ByteLevel(add_prefix_space=True,
                                     use_regex=False)]), False),
    }
    rng = random.Random(5)
    soup = ["".join(rng.choice(SOUP) for _ in range(rng.randint(1, 30)))
            for _ in range(RANDOM_STRINGS)]
    for name, (pre, list_merges, *rest) in variants.items():
        tok, data = build(pre, list_merges, *rest)
        with open(os.path.join(OUT, name), "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False, separators=(",", ":"))
        cases = [case(tok, text) for text in STRINGS + soup]
        expected[name] = {"vocab_size": tok.get_vocab_size(), "cases": cases}
    with open(os.path.join(OUT, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
