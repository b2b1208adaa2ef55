//===- CommTest.cpp - Batch splits, the ordered reduction, launch info ---===//
//
// The parts of data-parallel training (docs/distributed.md) that need no
// MPI: how a batch is split, the arithmetic of the reduction, the data a
// part reads, the single-process communicator and the launcher's
// environment. Jobs of several ranks run in test/lit/modrun/distributed-*.
//
//===----------------------------------------------------------------------===//
#include "modrt/Comm.h"
#include "TestUtil.h"
#include "modrt/Training.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

using namespace modrt;
using namespace modrt_test;

namespace {

template <typename Fn>
::testing::AssertionResult throws(Fn &&fn, const std::string &piece) {
  return throwsError(std::forward<Fn>(fn), std::vector<std::string>{piece});
}

TEST(CommTest, BatchSplitIsContiguousAndUneven) {
  BatchSplit s = BatchSplit::of(4, 3);
  EXPECT_EQ(s.counts, (std::vector<int64_t>{2, 1, 1}));
  EXPECT_EQ(s.first, (std::vector<int64_t>{0, 2, 3}));
  s = BatchSplit::of(8, 2);
  EXPECT_EQ(s.counts, (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(s.first, (std::vector<int64_t>{0, 4}));
  EXPECT_TRUE(throws([] { BatchSplit::of(2, 3); },
                          "a batch of 2 sequences cannot be split into 3 "
                          "parts of at least one sequence each; give "
                          "--batch >= 3"));
}

TEST(CommTest, OnePartIsLeftUnchanged) {
  // With one part, acc / B = g * B / B: every float comes back exactly.
  std::vector<float> g = {1.0f / 3, -7.25e-30f, 3.4e38f, 1e-45f, 0.1f};
  std::vector<double> acc(g.size(), 0.0);
  accumulatePart(g.data(), 1000003, acc.data(), g.size());
  std::vector<float> out(g.size());
  finishAccumulation(acc.data(), 1000003, out.data(), g.size());
  EXPECT_EQ(std::memcmp(out.data(), g.data(), g.size() * sizeof(float)), 0);
}

TEST(CommTest, PartsAreWeightedBySequences) {
  std::vector<float> a = {1.0f, 2.0f}, b = {4.0f, -2.0f};
  std::vector<double> acc(2, 0.0);
  accumulatePart(a.data(), 3, acc.data(), 2);
  accumulatePart(b.data(), 1, acc.data(), 2);
  std::vector<float> out(2);
  finishAccumulation(acc.data(), 4, out.data(), 2);
  EXPECT_EQ(out[0], 7.0f / 4);
  EXPECT_EQ(out[1], 1.0f);
}

TEST(CommTest, SingleCommunicatorReducesToItself) {
  std::unique_ptr<Communicator> comm = Communicator::single();
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  EXPECT_STREQ(comm->backend(), "single");
  std::vector<float> flat = {0.5f, -1.25f, 3.0f};
  std::vector<float> before = flat;
  reduceGradients(*comm, BatchSplit::of(5, 1), flat);
  EXPECT_EQ(flat, before);
  EXPECT_TRUE(throws(
      [&] { reduceGradients(*comm, BatchSplit::of(5, 2), flat); },
      "reduceGradients: the batch is split into 2 parts for 1 ranks"));
}

TEST(CommTest, PartsReadTheirWindowsOfTheBatch) {
  std::string bytes;
  for (int i = 0; i < 200; ++i)
    bytes += static_cast<char>('a' + i % 26);
  Corpus c = Corpus::fromBytes(bytes, 4, 3, "t");
  // A position near the end of the training split makes the batch wrap.
  uint64_t position = c.trainBytes() - 7;
  std::vector<int32_t> whole, part;
  uint64_t next = c.trainBatch(position, whole);
  std::vector<int32_t> joined;
  for (int64_t w = 0; w < 3; ++w) {
    EXPECT_EQ(c.trainWindows(position, w, 1, part), next);
    joined.insert(joined.end(), part.begin(), part.end());
  }
  EXPECT_EQ(joined, whole);
  EXPECT_EQ(c.trainWindows(position, 1, 2, part), next);
  EXPECT_EQ(part, std::vector<int32_t>(whole.begin() + 5, whole.end()));
  EXPECT_TRUE(throws([&] { c.trainWindows(position, 2, 2, part); },
                          "windows 2..4 are outside a batch of 3"));
}

/// Sets environment variables for one test and restores them after.
struct ScopedEnv {
  std::vector<std::pair<std::string, std::optional<std::string>>> saved;
  void set(const char *name, const char *value) {
    const char *old = std::getenv(name);
    saved.push_back({name, old ? std::optional<std::string>(old)
                               : std::nullopt});
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    for (auto it = saved.rbegin(); it != saved.rend(); ++it)
      if (it->second)
        ::setenv(it->first.c_str(), it->second->c_str(), 1);
      else
        ::unsetenv(it->first.c_str());
  }
};

TEST(CommTest, LaunchInfoFromTheLauncher) {
  ScopedEnv env;
  for (const char *v :
       {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK",
        "PMI_SIZE", "PMIX_RANK", "PMIX_SIZE", "SLURM_PROCID", "SLURM_NTASKS"})
    env.set(v, nullptr);
  EXPECT_FALSE(launchInfoFromEnvironment().has_value());
  EXPECT_STREQ(Communicator::connect(CommOptions{})->backend(), "single");

  env.set("SLURM_PROCID", "2");
  env.set("SLURM_NTASKS", "4");
  std::optional<LaunchInfo> info = launchInfoFromEnvironment();
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->rank, 2);
  EXPECT_EQ(info->size, 4);
  EXPECT_EQ(info->source, "SLURM_PROCID/SLURM_NTASKS");
  CommOptions single;
  single.backend = "single";
  EXPECT_TRUE(throws([&] { Communicator::connect(single); },
                          "this process is rank 2 of 4"));
  // Open MPI's variables come first.
  env.set("OMPI_COMM_WORLD_RANK", "0");
  env.set("OMPI_COMM_WORLD_SIZE", "1");
  EXPECT_EQ(launchInfoFromEnvironment()->source,
            "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE");
  EXPECT_STREQ(Communicator::connect(CommOptions{})->backend(), "single");
  env.set("OMPI_COMM_WORLD_SIZE", "-3");
  EXPECT_TRUE(throws([] { launchInfoFromEnvironment(); },
                          "environment variable OMPI_COMM_WORLD_SIZE=\"-3\" "
                          "is not a rank or process count"));
  CommOptions bad;
  bad.backend = "carrier-pigeon";
  env.set("OMPI_COMM_WORLD_SIZE", "1");
  EXPECT_TRUE(throws([&] { Communicator::connect(bad); },
                          "communicator backend must be auto, single, mpi or "
                          "nccl, got 'carrier-pigeon'"));
}

} // namespace
