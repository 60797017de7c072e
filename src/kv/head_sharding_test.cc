#include "kvferry/kv/head_sharding.h"

#include <gtest/gtest.h>

#include <vector>

namespace kvferry::kv {
namespace {

HeadSharding Make(int32_t heads, int32_t tp) { return HeadSharding::Create(heads, tp).value(); }

TEST(HeadShardingTest, SplitsOrReplicates) {
  const HeadSharding split = Make(4, 2);
  EXPECT_FALSE(split.replicated());
  EXPECT_EQ(split.HeadsPerRank(), 2);
  EXPECT_EQ(split.FirstHead(1), 2);
  EXPECT_EQ(split.SourceRank(3), 1);
  EXPECT_EQ(split.NumCopies(), 1);

  const HeadSharding rep = Make(2, 4);  // ranks 0,1 hold head 0; ranks 2,3 head 1
  EXPECT_TRUE(rep.replicated());
  EXPECT_EQ(rep.HeadsPerRank(), 1);
  EXPECT_EQ(rep.NumCopies(), 2);
  EXPECT_EQ((std::vector<int32_t>{rep.FirstHead(0), rep.FirstHead(1), rep.FirstHead(2),
                                  rep.FirstHead(3)}),
            (std::vector<int32_t>{0, 0, 1, 1}));
  EXPECT_EQ(rep.SourceRank(0), 0);  // the first copy
  EXPECT_EQ(rep.SourceRank(1), 2);
}

TEST(HeadShardingTest, RefusesHeadCountsThatDoNotDivide) {
  EXPECT_EQ(HeadSharding::Create(6, 4).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(HeadSharding::Create(2, 3).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(HeadSharding::Create(0, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(HeadSharding::Create(6, 2).ok());
  EXPECT_TRUE(HeadSharding::Create(1, 4).ok());
}

// Every destination rank gets each of its heads exactly once, from a source rank that holds it
// (a replicated head's readers spread over its copies), with local head indices that address the
// right global head on both sides.
// MLA's one latent head, replicated on every rank of both sides: D rank d reads P rank d mod P's
// size, so with D's TP at least P's every P rank is read, each by D/P ranks.
TEST(HeadShardingTest, OneReplicatedHeadSpreadsOverTheSourceRanks) {
  for (int32_t p_tp : {1, 2, 4}) {
    for (int32_t d_tp : {1, 2, 4}) {
      const HeadSharding src = HeadSharding::Create(1, p_tp).value();
      const HeadSharding dst = HeadSharding::Create(1, d_tp).value();
      for (int32_t d = 0; d < d_tp; ++d) {
        const std::vector<HeadRead> reads = PlanHeadReads(src, dst, d).value();
        ASSERT_EQ(reads.size(), 1u);
        EXPECT_EQ(reads[0].src_rank, d % p_tp);
        EXPECT_EQ(reads[0].num_heads, 1);
      }
      for (int32_t p = 0; p < p_tp; ++p) {
        EXPECT_EQ(CountReaders(src, dst, p).value(), p < d_tp ? (d_tp + p_tp - 1 - p) / p_tp : 0);
      }
    }
  }
}

TEST(HeadShardingTest, ReadsCoverEveryDestinationHeadOnce) {
  for (int32_t heads : {1, 2, 4, 8}) {
    for (int32_t src_tp : {1, 2, 4}) {
      for (int32_t dst_tp : {1, 2, 4}) {
        auto src = HeadSharding::Create(heads, src_tp);
        auto dst = HeadSharding::Create(heads, dst_tp);
        if (!src.ok() || !dst.ok()) continue;
        SCOPED_TRACE(testing::Message() << heads << " heads, tp " << src_tp << " -> " << dst_tp);
        std::vector<int32_t> readers(src_tp, 0);
        for (int32_t d = 0; d < dst_tp; ++d) {
          const std::vector<HeadRead> reads = PlanHeadReads(*src, *dst, d).value();
          int32_t next_local = 0;
          for (const HeadRead& r : reads) {
            EXPECT_EQ(r.dst_first_head, next_local);
            next_local += r.num_heads;
            ++readers[r.src_rank];
            for (int32_t i = 0; i < r.num_heads; ++i) {
              const int32_t global = dst->FirstHead(d) + r.dst_first_head + i;
              EXPECT_EQ(src->FirstHead(r.src_rank) + r.src_first_head + i, global);
              // A replicated head: the destination's i-th holder reads the source's copy i
              // mod copies (spread); otherwise the one (first) holder.
              const int32_t reader = dst->replicated() ? d - dst->SourceRank(global) : 0;
              const int32_t copy = src->replicated() ? reader % src->NumCopies() : 0;
              EXPECT_EQ(src->SourceRank(global) + copy, r.src_rank);
              EXPECT_LE(r.src_first_head + r.num_heads, src->HeadsPerRank());
            }
          }
          EXPECT_EQ(next_local, dst->HeadsPerRank());
        }
        for (int32_t p = 0; p < src_tp; ++p)
          EXPECT_EQ(CountReaders(*src, *dst, p).value(), readers[p]);
      }
    }
  }
}

TEST(HeadShardingTest, DocsRankMapping) {
  // docs/connector.md, "Rank mapping": 2 KV heads, P at TP 4 (replicated) -> D at TP 1 reads
  // head 0 from P rank 0 and head 1 from P rank 2; P ranks 1 and 3 are not read.
  const auto reads = PlanHeadReads(Make(2, 4), Make(2, 1), 0).value();
  EXPECT_EQ(reads, (std::vector<HeadRead>{{0, 0, 0, 1}, {2, 0, 1, 1}}));
  EXPECT_EQ(CountReaders(Make(2, 4), Make(2, 1), 1).value(), 0);
  // P at TP 1 -> D at TP 2: D rank 1 reads P rank 0's local head 1 into its head 0.
  EXPECT_EQ(PlanHeadReads(Make(2, 1), Make(2, 2), 1).value(),
            (std::vector<HeadRead>{{0, 1, 0, 1}}));
  // P at TP 2 -> D at TP 4 with 2 heads: D ranks 2 and 3 both read P rank 1.
  EXPECT_EQ(CountReaders(Make(2, 2), Make(2, 4), 1).value(), 2);
}

TEST(HeadShardingTest, RefusesDifferentModels) {
  EXPECT_EQ(PlanHeadReads(Make(2, 1), Make(4, 1), 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanHeadReads(Make(2, 1), Make(2, 2), 2).status().code(), StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace kvferry::kv
