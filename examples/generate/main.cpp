//===- main.cpp - Generate text with a modc package ----------------------===//
//
//   generate_example PKG WEIGHTS PROMPT [MAX_NEW [TEMPERATURE [SEED]]]
//
// Opens the package directory PKG (written by `modc compile`), loads WEIGHTS
// (a safetensors file of `modrun init`, or a checkpoint of `modrun train`;
// `random:N` initialises fresh weights from seed N instead), and prints up
// to MAX_NEW bytes (default 64) generated after PROMPT as they come.
// TEMPERATURE 0 is greedy (default 0.8, with top-p 0.95); SEED (default 0)
// makes sampling reproducible.
//
//===----------------------------------------------------------------------===//
#include "modrt/modrt.h"

#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char **argv) {
  if (argc < 4 || argc > 7) {
    std::fprintf(stderr, "usage: generate_example PKG WEIGHTS|random:N PROMPT "
                         "[MAX_NEW [TEMPERATURE [SEED]]]\n");
    return 2;
  }
  try {
    modrt::Package pkg = modrt::Package::open(argv[1]);
    std::string weightsArg = argv[2];
    modrt::TensorMap weights =
        weightsArg.rfind("random:", 0) == 0
            ? pkg.initWeights(std::strtoull(weightsArg.c_str() + 7, nullptr, 10))
            : modrt::loadWeights(weightsArg);

    int maxNew = argc > 4 ? std::atoi(argv[4]) : 64;
    modrt::SamplingConfig sampling;
    sampling.temperature = argc > 5 ? std::atof(argv[5]) : 0.8;
    sampling.topP = 0.95;
    sampling.seed = argc > 6 ? std::strtoull(argv[6], nullptr, 10) : 0;

    // One prompt; the callback sees every new byte as soon as it is chosen.
    std::string prompt = argv[3];
    std::fputs(prompt.c_str(), stdout);
    modrt::generate(pkg, weights, {prompt}, maxNew, sampling,
                    [](size_t, const std::string &piece) {
                      std::fwrite(piece.data(), 1, piece.size(), stdout);
                      std::fflush(stdout);
                    });
    std::fputc('\n', stdout);
  } catch (const modrt::Error &e) {
    std::fprintf(stderr, "generate_example: %s\n", e.what());
    return 1;
  }
  return 0;
}
