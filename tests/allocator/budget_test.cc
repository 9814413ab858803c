#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/log.h"
#include "monet/bytes.h"
#include "monet/errors.h"

namespace monet {
namespace {

using ::testing::HasSubstr;

constexpr std::size_t kGiB = std::size_t{1} << 30;

TEST(ParseBudget, AcceptsEveryDocumentedForm) {
  EXPECT_EQ(parse_budget("8GiB", 0), 8 * kGiB);
  EXPECT_EQ(parse_budget("8G", 0), 8 * kGiB);
  EXPECT_EQ(parse_budget("8g", 0), 8 * kGiB);
  EXPECT_EQ(parse_budget("7500MB", 0), 7500000000u);
  EXPECT_EQ(parse_budget("512MiB", 0), std::size_t{512} << 20);
  EXPECT_EQ(parse_budget("1073741824", 0), kGiB);
  EXPECT_EQ(parse_budget(" 1.5 GiB ", 0), kGiB + kGiB / 2);
  EXPECT_EQ(parse_budget("64K", 0), std::size_t{64} << 10);
  EXPECT_EQ(parse_budget("2TB", 0), std::size_t{2000000000000});
  EXPECT_EQ(parse_budget("60%", 10 * kGiB), 6 * kGiB);
  EXPECT_EQ(parse_budget("100%", 1000), 1000u);
}

TEST(ParseBudget, RejectsEverythingElseNamingTheVariableAndTheForms) {
  for (const char* bad : {"", "  ", "0", "0GiB", "0%", "eight", "8 gigs", "8GiBs", "-1G", "1.2.3G",
                          "150%", "%", "G8", "0.0000001B", "9000000TiB", "99999999999999999999"}) {
    SCOPED_TRACE(bad);
    try {
      parse_budget(bad, 16 * kGiB);
      FAIL() << "accepted";
    } catch (const ConfigError& e) {
      EXPECT_THAT(e.what(), HasSubstr("MONET_BUDGET"));
      EXPECT_THAT(e.what(), HasSubstr("8GiB"));
      EXPECT_THAT(e.what(), HasSubstr("60%"));
    }
  }
}

TEST(ParseBudget, NamesTheVariableItWasGiven) {
  EXPECT_THROW(
      {
        try {
          parse_budget("lots", 0, "MONET_CPU_BUDGET");
        } catch (const ConfigError& e) {
          EXPECT_THAT(e.what(), HasSubstr("MONET_CPU_BUDGET='lots'"));
          throw;
        }
      },
      ConfigError);
}

TEST(ParseBudget, ShareNeedsAKnownTotal) { EXPECT_THROW(parse_budget("50%", 0), ConfigError); }

TEST(FormatBytes, UsesBinaryUnits) {
  EXPECT_EQ(format_bytes(17), "17 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(3 * kGiB / 2), "1.50 GiB");
}

TEST(LogLevel, ParsesLevelsAndRejectsOthers) {
  EXPECT_EQ(parse_log_level("debug"), LogLevel::kDebug);
  EXPECT_EQ(parse_log_level("error"), LogLevel::kError);
  EXPECT_THROW(parse_log_level("verbose"), ConfigError);
}

}  // namespace
}  // namespace monet
