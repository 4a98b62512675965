// Stop strings on a stream: text is released as soon as it cannot begin a stop string,
// held while it might, cut before a completed stop string; partial matches that fail are
// released whole; on stories260K's tokenizer, stop strings that span tokens and UTF-8
// characters split over byte tokens.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/gguf/gguf.h"
#include "core/stop_strings.h"
#include "core/tokenizer/tokenizer.h"
#include "tests/support/test_data.h"

namespace qrun {
namespace {

// Pushes each piece and returns what was released after each push ("|" marks a stop).
std::vector<std::string> feed(StopStringMatcher& m, const std::vector<std::string>& pieces) {
  std::vector<std::string> out;
  for (const std::string& p : pieces) {
    const StopChunk c = m.push(p);
    out.push_back(c.text + (c.stopped ? "|" : ""));
  }
  return out;
}

using Strings = std::vector<std::string>;

TEST(StopStringMatcher, CutsBeforeAStopStringSpanningPushes) {
  StopStringMatcher m({"END"});
  EXPECT_EQ(feed(m, {"abc", "xEN", "Dyz", "more"}), (Strings{"abc", "x", "|", "|"}));
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "END");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopStringMatcher, PartialMatchesThatFailAreReleased) {
  StopStringMatcher m({"END"});
  EXPECT_EQ(feed(m, {"E", "N", "x", "EN"}), (Strings{"", "", "ENx", ""}));
  EXPECT_EQ(m.held_bytes(), 2u);
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.flush(), "EN");  // the end came before the D
  EXPECT_EQ(m.matched(), "");
}

TEST(StopStringMatcher, OverlappingPrefixes) {
  // "aaab" against "aab": after "aaa" only "aa" may still begin the stop string.
  StopStringMatcher m({"aab"});
  EXPECT_EQ(feed(m, {"a", "a", "a", "b"}), (Strings{"", "", "a", "|"}));
  StopStringMatcher n({"abab"});
  EXPECT_EQ(feed(n, {"ab", "a", "c", "abab", "z"}), (Strings{"", "", "abac", "|", "|"}));
}

TEST(StopStringMatcher, InsideOnePushAndAtTheStart) {
  StopStringMatcher m({"STOP"});
  EXPECT_EQ(feed(m, {"foo STOP bar"}), (Strings{"foo |"}));
  StopStringMatcher first({"\n\n"});
  EXPECT_EQ(feed(first, {"\n\nhello"}), (Strings{"|"}));
}

TEST(StopStringMatcher, SeveralStopStringsTheEarliestWins) {
  StopStringMatcher m({"world", "lo w", "zzz"});
  EXPECT_EQ(feed(m, {"hel", "lo", " world"}), (Strings{"he", "l", "|"}));  // "l" may begin "lo w"
  EXPECT_EQ(m.matched(), "lo w");
  // Two starting at the same place: the longer one is reported.
  StopStringMatcher same({"ab", "abc"});
  EXPECT_EQ(feed(same, {"xabcd"}), (Strings{"x|"}));
  EXPECT_EQ(same.matched(), "abc");
  // Held text is the longest suffix that any of them could still grow into.
  StopStringMatcher hold({"xyz", "yq"});
  EXPECT_EQ(feed(hold, {"axy"}), (Strings{"a"}));
  EXPECT_EQ(hold.held_bytes(), 2u);
}

TEST(StopStringMatcher, NoStopsAndEmptyStops) {
  StopStringMatcher m({});
  EXPECT_EQ(feed(m, {"a", "", "bc"}), (Strings{"a", "", "bc"}));
  StopStringMatcher e({"", ""});
  EXPECT_EQ(feed(e, {"text"}), (Strings{"text"}));
  StopStringMatcher r({"b"});
  EXPECT_EQ(feed(r, {"abc"}), (Strings{"a|"}));
  r.reset();
  EXPECT_FALSE(r.stopped());
  EXPECT_EQ(feed(r, {"xyz"}), (Strings{"xyz"}));
}

TEST(StopStringMatcher, Utf8StopStrings) {
  StopStringMatcher m({"é!"});
  EXPECT_EQ(feed(m, {"caf", "é", "?", "é", "!"}), (Strings{"caf", "", "é?", "", "|"}));
}

class StopStringFilterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Result<gguf::File> f = gguf::File::open(test::data_path("models/stories260K.gguf").string());
    ASSERT_TRUE(f.ok()) << f.error().message;
    file_ = std::make_unique<gguf::File>(std::move(f.value()));
    Result<std::unique_ptr<Tokenizer>> t = Tokenizer::from_gguf(*file_);
    ASSERT_TRUE(t.ok()) << t.error().message;
    tok_ = std::move(t.value());
  }

  // Feeds `ids` and returns the text released after each token ("|" marks a stop).
  Strings feed_tokens(StopStringFilter& f, const std::vector<int32_t>& ids) {
    Strings out;
    for (int32_t id : ids) {
      const StopChunk c = f.push(id);
      out.push_back(c.text + (c.stopped ? "|" : ""));
    }
    return out;
  }

  std::unique_ptr<gguf::File> file_;
  std::unique_ptr<Tokenizer> tok_;
};

// stories260K: 403 " Once", 407 " upon", 261 " a", 378 " time", 432 ","; byte tokens are
// 3 + the byte, so 中 (E4 B8 AD) is 231 187 176; 443 "!".
TEST_F(StopStringFilterTest, PiecesAsTheTokenizerSpellsThem) {
  EXPECT_EQ(tok_->token_to_piece(407, false), " upon");
  EXPECT_EQ(tok_->token_to_piece(231, false), "\xE4");
  EXPECT_EQ(tok_->token_to_piece(443, false), "!");
}

TEST_F(StopStringFilterTest, StopStringSpanningTokens) {
  StopStringFilter f(*tok_, {"on a ti"});
  // " upon" is held from "on" (it may begin the stop string); " a" keeps it held; " time"
  // completes it: " up" is released and the rest never is.
  EXPECT_EQ(feed_tokens(f, {403, 407, 261, 378, 432}), (Strings{" Once", " up", "", "|", "|"}));
  EXPECT_TRUE(f.stopped());
  EXPECT_EQ(f.flush(), "");
}

TEST_F(StopStringFilterTest, PartialMatchAcrossTokensThatFails) {
  StopStringFilter f(*tok_, {"upon a tree"});
  EXPECT_EQ(feed_tokens(f, {403, 407, 261, 378, 432}),
            (Strings{" Once", " ", "", "upon a time", ","}));
  EXPECT_EQ(f.flush(), "");
}

TEST_F(StopStringFilterTest, Utf8SplitAcrossByteTokens) {
  // The character is released only when complete, and a stop string made of it matches
  // only then.
  StopStringFilter plain(*tok_, {"!!"});
  EXPECT_EQ(feed_tokens(plain, {231, 187, 176, 443}), (Strings{"", "", "中", ""}));
  EXPECT_EQ(plain.flush(), "!");

  StopStringFilter stop(*tok_, {"中!"});
  EXPECT_EQ(feed_tokens(stop, {403, 231, 187, 176, 443}), (Strings{" Once", "", "", "", "|"}));

  StopStringFilter no_match(*tok_, {"中?"});
  EXPECT_EQ(feed_tokens(no_match, {231, 187, 176, 443}), (Strings{"", "", "", "中!"}));

  // A character cut off by the end of generation flushes as U+FFFD.
  StopStringFilter cut(*tok_, {"zz"});
  EXPECT_EQ(feed_tokens(cut, {403, 231, 187}), (Strings{" Once", "", ""}));
  EXPECT_EQ(cut.flush(), "\xEF\xBF\xBD");
}

}  // namespace
}  // namespace qrun
