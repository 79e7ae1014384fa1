#include "engine/text_stream.h"

#include <gtest/gtest.h>

namespace hc {
namespace {

TEST(TextStream, HoldsBackASplitCharacterUntilItCompletes) {
  TextStream ts;
  EXPECT_EQ(ts.push("caf"), "caf");
  EXPECT_EQ(ts.push("\xC3"), "");          // first byte of é
  EXPECT_EQ(ts.push("\xA9!"), "\xC3\xA9!");
  EXPECT_EQ(ts.push("\xF0\x9F"), "");      // half of an emoji
  EXPECT_EQ(ts.push("\x98"), "");
  EXPECT_EQ(ts.push("\x80"), "\xF0\x9F\x98\x80");
  EXPECT_EQ(ts.text(), "caf\xC3\xA9!\xF0\x9F\x98\x80");
}

TEST(TextStream, InvalidBytesBecomeReplacementCharacters) {
  TextStream ts;
  EXPECT_EQ(ts.push("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
  EXPECT_EQ(ts.push("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong '/'
  EXPECT_EQ(ts.push("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
  EXPECT_EQ(ts.push("\xE2\x82"), "");  // truncated at the end of generation
  EXPECT_EQ(ts.flush(), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_TRUE(utf8_valid(ts.text()));
}

TEST(TextStream, StopStringAcrossPiecesIsCutWithWhatFollows) {
  TextStream ts({"<|end|>", "###"});
  EXPECT_EQ(ts.push("Hello <"), "Hello ");  // "<" may start "<|end|>"
  EXPECT_EQ(ts.push("|en"), "");
  EXPECT_EQ(ts.push("d|> tail"), "");
  EXPECT_TRUE(ts.stopped());
  EXPECT_EQ(ts.push("more"), "");
  EXPECT_EQ(ts.flush(), "");
  EXPECT_EQ(ts.text(), "Hello ");
}

TEST(TextStream, HeldPrefixIsReleasedWhenItDoesNotMatch) {
  TextStream ts({"###"});
  EXPECT_EQ(ts.push("a#"), "a");
  EXPECT_EQ(ts.push("#"), "");
  EXPECT_EQ(ts.push("b"), "##b");
  EXPECT_FALSE(ts.stopped());
  EXPECT_EQ(ts.push("##"), "");
  EXPECT_EQ(ts.flush(), "##");  // the end of generation releases a partial match
  EXPECT_EQ(ts.text(), "a##b##");
}

TEST(TextStream, EarliestStopWinsAndEmptyStopsAreIgnored) {
  TextStream ts({"", "cd", "b"});
  EXPECT_EQ(ts.push("abcd"), "a");
  EXPECT_TRUE(ts.stopped());
}

TEST(TextStream, Utf8Helpers) {
  EXPECT_EQ(utf8_complete_prefix("ab\xE2\x82"), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab\xE2\x82\xAC"), 5u);
  EXPECT_EQ(utf8_complete_prefix("\xFF"), 1u);  // invalid, not incomplete
  EXPECT_TRUE(utf8_valid("\xE2\x82\xAC"));
  EXPECT_FALSE(utf8_valid("\xF5\x80\x80\x80"));  // beyond U+10FFFF
  EXPECT_EQ(utf8_sanitize("\xF4\x90\x80\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
}

}  // namespace
}  // namespace hc
