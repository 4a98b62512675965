// gguf::Value helpers: kind checks, numeric conversions, type names, and display strings
// that stay one printable line whatever a file puts in them.
#include <gtest/gtest.h>

#include "core/gguf/gguf.h"

namespace qrun::gguf {
namespace {

TEST(GgufValue, TypeIndexMatchesGgufIds) {
  EXPECT_EQ(Value{uint8_t{1}}.type(), ValueType::kUint8);
  EXPECT_EQ(Value{int8_t{1}}.type(), ValueType::kInt8);
  EXPECT_EQ(Value{uint16_t{1}}.type(), ValueType::kUint16);
  EXPECT_EQ(Value{int16_t{1}}.type(), ValueType::kInt16);
  EXPECT_EQ(Value{uint32_t{1}}.type(), ValueType::kUint32);
  EXPECT_EQ(Value{int32_t{1}}.type(), ValueType::kInt32);
  EXPECT_EQ(Value{1.0f}.type(), ValueType::kFloat32);
  EXPECT_EQ(Value{true}.type(), ValueType::kBool);
  EXPECT_EQ(Value{std::string("s")}.type(), ValueType::kString);
  EXPECT_EQ(Value{Array{}}.type(), ValueType::kArray);
  EXPECT_EQ(Value{uint64_t{1}}.type(), ValueType::kUint64);
  EXPECT_EQ(Value{int64_t{1}}.type(), ValueType::kInt64);
  EXPECT_EQ(Value{1.0}.type(), ValueType::kFloat64);
  EXPECT_STREQ(value_type_name(ValueType::kFloat64), "f64");
  EXPECT_STREQ(value_type_name(ValueType::kString), "string");
  EXPECT_STREQ(value_type_name(static_cast<ValueType>(99)), "unknown");
}

TEST(GgufValue, KindsAndConversions) {
  EXPECT_TRUE(Value{int16_t{-3}}.is_integer());
  EXPECT_FALSE(Value{true}.is_integer());
  EXPECT_FALSE(Value{1.0f}.is_integer());
  EXPECT_TRUE(Value{1.0f}.is_float());
  EXPECT_EQ(Value{int16_t{-3}}.as_int(), -3);
  EXPECT_EQ(Value{true}.as_int(), 1);
  EXPECT_DOUBLE_EQ(Value{uint32_t{7}}.as_double(), 7.0);
  EXPECT_DOUBLE_EQ(Value{0.5f}.as_double(), 0.5);
}

TEST(GgufValue, DisplayStrings) {
  EXPECT_EQ(Value{int32_t{-5}}.to_display_string(), "-5");
  EXPECT_EQ(Value{uint64_t{18446744073709551615u}}.to_display_string(), "18446744073709551615");
  EXPECT_EQ(Value{false}.to_display_string(), "false");
  EXPECT_EQ(Value{1.5f}.to_display_string(), "1.5");
  EXPECT_EQ(Value{std::string("a\"b\\c\nd\te\x1b[2J")}.to_display_string(),
            "\"a\\\"b\\\\c\\nd\\te\\x1b[2J\"");
  Array small{ValueType::kInt32, {Value{int32_t{1}}, Value{int32_t{2}}}};
  EXPECT_EQ(Value{small}.to_display_string(), "[1, 2]");
  Array big{ValueType::kString, std::vector<Value>(100, Value{std::string("t")})};
  EXPECT_EQ(Value{big}.to_display_string(), "[100 string]");
}

TEST(GgufValue, LongStringsAreCutOnACharacterBoundary) {
  std::string s(76, 'x');
  s += "\xc3\xa9\xc3\xa9";  // two-byte characters straddle byte 77
  s += std::string(20, 'y');
  const std::string d = Value{s}.to_display_string();
  EXPECT_EQ(d, "\"" + std::string(76, 'x') + "...\"");
  EXPECT_EQ(Value{std::string(80, 'z')}.to_display_string(), "\"" + std::string(80, 'z') + "\"");
}

}  // namespace
}  // namespace qrun::gguf
