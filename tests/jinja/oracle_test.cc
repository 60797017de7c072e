// kvferry::jinja against Jinja2: every case jinja_oracle.py rendered (real chat templates x
// chats, and one small template per feature) is rendered here too, and must give the same
// bytes; where Jinja2's raise_exception fired the same message; where Jinja2 failed otherwise,
// a failure too.
#include <gtest/gtest.h>

#include <ctime>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "kvferry/jinja/chat.h"
#include "kvferry/jinja/template.h"

namespace kvferry::jinja {
namespace {

using Json = nlohmann::ordered_json;

// "2024-07-26T09:05:03" as a local broken-down time, the clock both renders format.
std::tm ParseNow(const std::string& iso) {
  std::tm tm{};
  std::istringstream in(iso);
  in >> std::get_time(&tm, "%Y-%m-%dT%H:%M:%S");
  tm.tm_isdst = -1;
  std::tm copy = tm;
  std::mktime(&copy);  // fills in the weekday and the day of the year
  tm.tm_wday = copy.tm_wday;
  tm.tm_yday = copy.tm_yday;
  return tm;
}

// Where two strings first differ, with a little context, for failure messages.
std::string FirstDifference(const std::string& want, const std::string& got) {
  size_t i = 0;
  while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
  const size_t from = i < 40 ? 0 : i - 40;
  return "first difference at byte " + std::to_string(i) +
         "\n  Jinja2: " + Json(want.substr(from, 120)).dump() +
         "\n  kvferry: " + Json(got.substr(from, 120)).dump();
}

StatusOr<std::string> RenderCase(const Json& c, const RenderOptions& options) {
  KVF_ASSIGN_OR_RETURN(Template t, Template::Parse(c["template"].get<std::string>()));
  if (!c.contains("chat")) return t.Render(c["context"], options);
  const Json& chat = c["chat"];
  ChatInputs in;
  in.messages = chat["messages"];
  if (!chat["tools"].is_null()) in.tools = chat["tools"];
  in.add_generation_prompt = chat["add_generation_prompt"].get<bool>();
  for (const auto& [name, token] : chat["special_tokens"].items()) {
    in.special_tokens[name] = token.get<std::string>();
  }
  in.extra = chat["extra"];
  return RenderChat(t, in, options);
}

struct Tally {
  int outputs = 0, raised = 0, errors = 0, failed = 0;
};

// Checks one case; returns a failure description, or "" when kvferry agrees with Jinja2.
std::string Check(const Json& c, const RenderOptions& options, Tally* tally) {
  const StatusOr<std::string> got = RenderCase(c, options);
  if (c.contains("output")) {
    const std::string want = c["output"].get<std::string>();
    if (!got.ok()) return "Jinja2 rendered, kvferry failed: " + got.status().ToString();
    if (*got != want) return FirstDifference(want, *got);
    ++tally->outputs;
    return "";
  }
  if (c.contains("raised")) {
    const std::string want = c["raised"].get<std::string>();
    if (got.ok()) return "Jinja2 raised '" + want + "', kvferry rendered " + Json(*got).dump();
    if (got.status().code() != StatusCode::kInvalidArgument || got.status().message() != want) {
      return "Jinja2 raised '" + want + "', kvferry: " + got.status().ToString();
    }
    ++tally->raised;
    return "";
  }
  if (got.ok()) {
    return "Jinja2 failed (" + c["error"].get<std::string>() + "), kvferry rendered " +
           Json(*got).dump();
  }
  ++tally->errors;
  return "";
}

TEST(JinjaOracle, EveryCaseMatchesJinja2) {
  std::ifstream in(KVF_JINJA_EXPECTED);
  ASSERT_TRUE(in) << "no " << KVF_JINJA_EXPECTED << ": the jinja_oracle_expected fixture "
                  << "(tests/jinja/jinja_oracle.py, python3 with Jinja2) did not run";
  const Json expected = Json::parse(in);
  RenderOptions options;
  options.now = ParseNow(expected["now"].get<std::string>());
  Tally tally;
  for (const Json& c : expected["cases"]) {
    const std::string id = c["id"].get<std::string>();
    if (c.contains("missing")) {
      ADD_FAILURE() << id << ": " << c["missing"].get<std::string>()
                    << " is missing (scripts/install-refs.sh installs the npm packages)";
      ++tally.failed;
      continue;
    }
    const std::string failure = Check(c, options, &tally);
    if (!failure.empty()) {
      ADD_FAILURE() << id << ": " << failure;
      ++tally.failed;
    }
  }
  std::cout << "jinja oracle (Jinja2 " << expected["jinja2"].get<std::string>()
            << "): " << expected["cases"].size() << " cases; identical output " << tally.outputs
            << ", identical raise_exception message " << tally.raised << ", failing on both sides "
            << tally.errors << "; mismatches " << tally.failed << "\n";
  EXPECT_GT(tally.outputs, 0);
}

}  // namespace
}  // namespace kvferry::jinja
