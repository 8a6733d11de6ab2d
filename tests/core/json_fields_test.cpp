#include "core/json_fields.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace calo::core {
namespace {

struct Inner {
  double value_w = 0;
  std::string label;
};
CALO_JSON_FIELDS(Inner, value_w, label)

struct Outer {
  int count = 0;
  bool ok = false;
  std::vector<Inner> inners;
  double derived_source_s = 0;
};
CALO_JSON_FIELDS(Outer, count, ok, inners, derived_source_s)
CALO_JSON_WRITER(write_count_only, Outer, count)

TEST(JsonFields, EveryListedMemberUnderItsOwnNameNestedStructsToo) {
  const Outer outer{3, true, {{1.5, "a"}, {2.5, "b"}}, 0.25};
  const nlohmann::json json = outer;
  EXPECT_EQ(json.size(), 4u);
  EXPECT_EQ(json.at("count"), 3);
  EXPECT_EQ(json.at("ok"), true);
  EXPECT_EQ(json.at("derived_source_s"), 0.25);
  ASSERT_EQ(json.at("inners").size(), 2u);
  EXPECT_EQ(json.at("inners")[1].at("value_w"), 2.5);
  EXPECT_EQ(json.at("inners")[1].at("label"), "b");
}

TEST(JsonFields, AWriterAddsItsMembersBesideWhatTheObjectHolds) {
  nlohmann::json json = {{"derived_ms", 250.0}};
  write_count_only(json, Outer{7, false, {}, 0.25});
  EXPECT_EQ(json, (nlohmann::json{{"derived_ms", 250.0}, {"count", 7}}));
}

}  // namespace
}  // namespace calo::core
