#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into test/fuzz/corpus/.

The committed seeds came from this script (docs/testing.md); rerun it when a
file format changes:

  test/fuzz/make-seeds.py BUILD   # a build with modc, modrun and the tests

Each seed is small and valid (or nearly so), so that mutations reach the
checks past the first ones.
"""
import ctypes
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def safetensors(tensors, metadata=None):
    """Bytes of a safetensors file: tensors is [(name, dtype, shape, values)];
    BF16 and F16 values are the 16-bit patterns."""
    header, data = {}, b""
    for name, dtype, shape, values in tensors:
        code = {"F32": "f", "BF16": "H", "F16": "H"}.get(dtype, "i")
        fmt = "<%d%s" % (len(values), code)
        raw = struct.pack(fmt, *values)
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(text)) + text + data


def embedded_manifest(lib):
    fn = ctypes.CDLL(lib).modc_manifest_json
    fn.restype = ctypes.c_char_p
    return fn()


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def main():
    build = os.path.abspath(sys.argv[1])
    modrun = os.path.join(build, "runtime", "modrun")
    modc = os.path.join(build, "bin", "modc")
    fake = lambda v: os.path.join(build, "test", "runtime",
                                  "libmodrt_fake_model_v%d.so" % v)
    tmp = tempfile.mkdtemp()
    try:
        run(build, modrun, modc, fake, tmp)
    finally:
        shutil.rmtree(tmp)


def package_dir(tmp, name, lib):
    d = os.path.join(tmp, name)
    os.makedirs(d)
    shutil.copy(lib, os.path.join(d, "libmodel.so"))
    with open(os.path.join(d, "manifest.json"), "wb") as f:
        f.write(embedded_manifest(lib))
    return d


def run(build, modrun, modc, fake, tmp):
    v0 = package_dir(tmp, "v0", fake(0))
    v6 = package_dir(tmp, "v6", fake(6))
    weights = os.path.join(tmp, "w.safetensors")
    subprocess.run([modrun, "init", v0, "--seed", "1", "--out", weights],
                   check=True)

    # safetensors: real weights, tokens, and the corner cases of the format.
    write("safetensors", "weights-v0", open(weights, "rb").read())
    write("safetensors", "tokens",
          safetensors([("tokens", "I32", [2, 4], list(range(8)))],
                      {"modrun.tokenizer": "bytes"}))
    write("safetensors", "mixed",
          safetensors([("a", "F32", [2], [1.5, -2.0]),
                       ("b", "I32", [], [7]),
                       ("c", "F32", [0, 3], [])]))
    write("safetensors", "empty", safetensors([], {}))
    # tokenizer: the fixture tokenizers of test/data/tokenizer, each followed
    # by a NUL and a text to encode.
    for name, text in (
            ("tokenizer", "Grüße 12345 ½ 日本語 🙂<|endoftext|>x"),
            ("gpt2-tokenizer", "It's what they'd said:\n\n  spaces\t"),
            ("llama3-tokenizer", "Numbers 1234567 and CAFÉ'S"),
            ("split-tokenizer", "a b, c. xyz 42")):
        with open(os.path.join(ROOT, "test", "data", "tokenizer",
                               name + ".json"), "rb") as f:
            write("tokenizer", name, f.read() + b"\0" + text.encode())
    # Half precision as pretrained checkpoints hold it: +-0, +-inf, NaN, the
    # largest and smallest (subnormal) values, ordinary numbers.
    write("safetensors", "half",
          safetensors([("b", "BF16", [2, 4], [0x0000, 0x8000, 0x7f80, 0xffc0,
                                              0x7f7f, 0x0001, 0x3f80, 0xc049]),
                       ("h", "F16", [8], [0x0000, 0x8000, 0xfc00, 0x7e00,
                                          0x7bff, 0x0001, 0x03ff, 0x3c00])],
                      {"format": "pt"}))

    # tokens: for the fake package (vocab 8, seq_len 4).
    write("tokens", "forward",
          safetensors([("tokens", "I32", [2, 4], [0, 1, 2, 3, 4, 5, 6, 7])]))
    write("tokens", "grad",
          safetensors([("tokens", "I32", [1, 5], [1, 2, 3, 4, 5])]))
    write("tokens", "out-of-vocab",
          safetensors([("tokens", "I32", [1, 4], [0, 1, 8, 3])]))
    write("tokens", "f32",
          safetensors([("tokens", "F32", [1, 4], [0.0, 1.0, 2.0, 3.0])]))

    # checkpoint: real checkpoints of the byte-level fake package, on the
    # corpus fuzz_checkpoint.cpp trains on.
    data = os.path.join(tmp, "data.txt")
    with open(data, "w") as f:
        f.write("the quick brown fox " * 64)
    for name, extra in (("step1", ["--stop-after", "1"]), ("done", [])):
        ck = os.path.join(tmp, name + ".ckpt")
        subprocess.run([modrun, "train", v6, "--data", data, "--out", ck,
                        "--steps", "2", "--batch", "2", "--lr", "0.01",
                        "--seed", "1"] + extra, check=True,
                       stderr=subprocess.DEVNULL)
        write("checkpoint", name, open(ck, "rb").read())

    # manifest: the fake packages' and a compiled package's.
    write("manifest", "fake-v0", embedded_manifest(fake(0)))
    write("manifest", "fake-v6", embedded_manifest(fake(6)))
    model = os.path.join(tmp, "small.json")
    with open(model, "w") as f:
        json.dump({"name": "small", "vocab_size": 16, "d_model": 8,
                   "n_layers": 2, "n_heads": 2, "d_ff": 16, "seq_len": 8,
                   "mod": {"capacity": 0.5, "causal_router": "predictor"}},
                  f)
    pkg = os.path.join(tmp, "small")
    subprocess.run([modc, "compile", model, "-o", pkg, "--march",
                    "x86-64"], check=True, stderr=subprocess.DEVNULL)
    write("manifest", "compiled",
          open(os.path.join(pkg, "manifest.json"), "rb").read())

    # package: mode byte 0 + manifest.json, mode byte 1 + libmodel.so.
    lib = open(fake(0), "rb").read()
    write("package", "manifest-v0", b"\0" + embedded_manifest(fake(0)))
    write("package", "manifest-v6", b"\0" + embedded_manifest(fake(6)))
    write("package", "elf-header", b"\1" + lib[:64])
    write("package", "elf-4k", b"\1" + lib[:4096])

    # importer_json: the examples and the small model above.
    for path in ("examples/tiny-mod.json", "examples/tiny-mod-bf16.json",
                 "examples/tiny-gqa.json", "examples/mod_vs_dense/dense.json"):
        write("importer_json", os.path.basename(path),
              open(os.path.join(ROOT, path), "rb").read())
    write("importer_json", "small.json", open(model, "rb").read())

    # importer_mlir: what `modc compile --emit=mlir` prints for them.
    for path in ("examples/tiny-mod.json", "examples/tiny-gqa.json",
                 "examples/mod_vs_dense/dense.json", model):
        text = subprocess.run([modc, "compile", path if os.path.isabs(path)
                               else os.path.join(ROOT, path), "--emit=mlir"],
                              check=True, capture_output=True).stdout
        write("importer_mlir",
              os.path.basename(path).replace(".json", ".mlir"), text)


if __name__ == "__main__":
    main()
