// core/strings.h: the string helpers every layer uses.
#include "core/strings.h"

#include <gtest/gtest.h>

namespace zt {
namespace {

TEST(Strings, StartsWith) {
  EXPECT_TRUE(starts_with("model.safetensors", "model"));
  EXPECT_TRUE(starts_with("model", "model"));
  EXPECT_TRUE(starts_with("model", ""));
  EXPECT_TRUE(starts_with("", ""));
  EXPECT_FALSE(starts_with("mod", "model"));  // prefix longer than the string
  EXPECT_FALSE(starts_with("", "m"));
  EXPECT_FALSE(starts_with("xmodel", "model"));
  EXPECT_FALSE(starts_with("Model", "model"));
}

TEST(Strings, EndsWith) {
  EXPECT_TRUE(ends_with("data.jsonl", ".jsonl"));
  EXPECT_TRUE(ends_with(".bin", ".bin"));
  EXPECT_TRUE(ends_with("data.bin", ""));  // empty suffix
  EXPECT_TRUE(ends_with("", ""));
  EXPECT_FALSE(ends_with("bin", ".bin"));  // suffix longer than the string
  EXPECT_FALSE(ends_with("", ".bin"));
  EXPECT_FALSE(ends_with("data.json", ".jsonl"));
  EXPECT_FALSE(ends_with("data.BIN", ".bin"));
  const std::string with_nul("a\0b", 3);
  EXPECT_TRUE(ends_with(with_nul, std::string("\0b", 2)));
}

TEST(Strings, Lower) {
  EXPECT_EQ(lower("AdamW"), "adamw");
  EXPECT_EQ(lower(""), "");
  EXPECT_EQ(lower("NVIDIA H100 80GB"), "nvidia h100 80gb");
  EXPECT_EQ(lower("caf\xC3\x89"), "caf\xC3\x89");  // bytes past ASCII unchanged
}

TEST(Strings, Join) {
  EXPECT_EQ(join({}, ", "), "");
  EXPECT_EQ(join({"q_proj"}, ", "), "q_proj");
  EXPECT_EQ(join({"q_proj", "k_proj", "v_proj"}, ", "), "q_proj, k_proj, v_proj");
  EXPECT_EQ(join({"a", "b"}, ""), "ab");
  EXPECT_EQ(join({"a", "b"}, "; "), "a; b");
}

TEST(Strings, EditDistance) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
  EXPECT_EQ(edit_distance("train", "train"), 0u);
  EXPECT_EQ(edit_distance("trian", "train"), 2u);  // a transposition is two edits
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("--lr", "--l"), 1u);
  EXPECT_EQ(edit_distance("Train", "train"), 1u);
  EXPECT_EQ(edit_distance("Train", "train", Case::Insensitive), 0u);
  EXPECT_EQ(edit_distance("TRAIN_batch", "train_BATCH", Case::Insensitive), 0u);
  EXPECT_EQ(edit_distance("abc", "abd", Case::Insensitive), 1u);
}

TEST(Strings, ClosestMatch) {
  const std::vector<std::string> commands = {"train", "eval", "export"};
  EXPECT_EQ(closest_match("trian", commands, 3), "train");
  EXPECT_EQ(closest_match("evl", commands, 3), "eval");
  EXPECT_EQ(closest_match("completely-different", commands, 3), "");
  EXPECT_EQ(closest_match("anything", {}, 3), "");
  EXPECT_EQ(closest_match("", {"ab", "abcd"}, 3), "ab");
  // Exactly max_distance away is a match; one more is not.
  EXPECT_EQ(closest_match("abc", {"xyz"}, 3), "xyz");
  EXPECT_EQ(closest_match("abc", {"xyz"}, 2), "");
  // A tie goes to the first candidate.
  EXPECT_EQ(closest_match("ab", {"ax", "ay"}, 3), "ax");
  EXPECT_EQ(closest_match("TRAIN", commands, 0, Case::Insensitive), "train");
  EXPECT_EQ(closest_match("TRAIN", commands, 0), "");
}

}  // namespace
}  // namespace zt
