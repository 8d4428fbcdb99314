// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// base::JsonStream writes what nlohmann's dump() writes for the same
// document, at every indent, for every kind of value.
#include "base/json_stream.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "base/json_limits.h"

namespace trainprof {
namespace {

using nlohmann::json;

// Writes `value` (a tree) through a JsonStream, keys in the tree's order.
void stream(base::JsonStream& j, const json& value) {
  switch (value.type()) {
    case json::value_t::object:
      j.begin_object();
      for (const auto& [k, v] : value.items()) {
        j.key(k);
        stream(j, v);
      }
      j.end_object();
      break;
    case json::value_t::array:
      j.begin_array();
      for (const json& v : value) stream(j, v);
      j.end_array();
      break;
    case json::value_t::string: j.string(value.get<std::string>()); break;
    case json::value_t::boolean: j.boolean(value.get<bool>()); break;
    case json::value_t::number_integer: j.number(value.get<int64_t>()); break;
    case json::value_t::number_unsigned: j.number(value.get<uint64_t>()); break;
    case json::value_t::number_float: j.number(value.get<double>()); break;
    default: j.raw("null");
  }
}

std::string streamed(const json& value, int indent) {
  std::string out;
  base::JsonStream j(out, indent);
  stream(j, value);
  return out;
}

TEST(JsonStream, EveryKindOfValueAsNlohmannDumpsIt) {
  json doc = {{"b", {{"empty object", json::object()}, {"empty array", json::array()}}},
              {"a", json::array({1, -2, 3.5, 0.0, -0.0, 1e-7, 1e21, 0.1, true, false, "x"})},
              {"Transit Time(ms)", 12.345678901234567},
              {"name \"quoted\" \\ \n\t", std::string("bytes \xff\xfe not UTF-8, \x01 control")},
              {"unsigned", uint64_t{18446744073709551615u}},
              {"nested", {{"z", {{"y", json::array({json::object(), json::array({1, 2})})}}}}}};
  for (int indent : {-1, 0, 1, 2, 4}) {
    EXPECT_EQ(streamed(doc, indent), base::json_text(doc, indent)) << indent;
  }
}

TEST(JsonStream, DoublesAreWrittenAsNlohmannWritesThem) {
  std::mt19937_64 random(42);
  std::uniform_int_distribution<uint64_t> bits;
  std::uniform_real_distribution<double> ms(0, 1e4);
  for (int i = 0; i < 100000; ++i) {
    uint64_t b = bits(random);
    double any;
    std::memcpy(&any, &b, sizeof(any));
    for (double v : {any, ms(random), std::round(ms(random) * 1e4) / 1e4, static_cast<double>(i) / 1e6}) {
      std::string out;
      base::JsonStream(out).number(v);
      ASSERT_EQ(out, json(v).dump()) << b;
    }
  }
  std::string out;
  base::JsonStream(out).number(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(out, "null");
}

TEST(JsonStream, AValueWrittenAtADepthFitsTheDocumentAroundIt) {
  json inner = {{"k", json::array({1, 2})}, {"l", 3}};
  json outer = {{"a", {{"b", inner}}}};
  std::string value;
  base::JsonStream at_depth(value, 1, 2);
  stream(at_depth, inner);
  std::string out;
  base::JsonStream j(out, 1);
  j.begin_object().key("a").begin_object().key("b").raw(value).end_object().end_object();
  EXPECT_EQ(out, outer.dump(1));
}

}  // namespace
}  // namespace trainprof
