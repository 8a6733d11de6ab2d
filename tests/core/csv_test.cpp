// The one CSV writer (core::CsvWriter, issue 67 item 10): fields with a comma, quote, CR or LF are quoted as
// RFC 4180 says, numbers read back exactly, and NaN / Inf are empty fields.
#include "core/csv.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

namespace calo::core {
namespace {

TEST(Csv, FieldsThatWouldBreakARowAreQuoted) {
  EXPECT_EQ(csv_field("power_w"), "power_w");
  EXPECT_EQ(csv_field(""), "");
  EXPECT_EQ(csv_field("a,b"), "\"a,b\"");
  EXPECT_EQ(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(csv_field("two\nlines"), "\"two\nlines\"");
  EXPECT_EQ(csv_field("carriage\rreturn"), "\"carriage\rreturn\"");
}

TEST(Csv, RowsHoldTextNumbersAndBlanks) {
  char* buffer = nullptr;
  std::size_t size = 0;
  std::FILE* out = open_memstream(&buffer, &size);
  ASSERT_NE(out, nullptr);
  {
    CsvWriter csv(out);
    csv.header({"name", "n", "value"});
    csv.text("a,b").integer(std::numeric_limits<int64_t>::min()).number(0.1).end_row();
    csv.text("x").integer(7).number(std::nan("")).end_row();
    csv.blank().integer(0).number(-std::numeric_limits<double>::infinity()).end_row();
  }
  std::fclose(out);
  const std::string text(buffer, size);
  std::free(buffer);
  EXPECT_EQ(text, "name,n,value\n\"a,b\",-9223372036854775808,0.1\nx,7,\n,0,\n");
}

}  // namespace
}  // namespace calo::core
