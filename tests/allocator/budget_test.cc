#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/atomic_file.h"
#include "common/log.h"
#include "common/numbers.h"
#include "monet/bytes.h"
#include "monet/errors.h"

namespace monet {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

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

// The message offers a share of what the caller says the total is.
TEST(ParseBudget, OffersAShareOfWhatTheTotalIs) {
  try {
    parse_budget("lots", 1000, "--budget", "the chain's peak without checkpoints");
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("a share of the chain's peak without checkpoints (60%)"));
    EXPECT_THAT(e.what(), Not(HasSubstr("device")));
  }
  try {
    parse_budget("lots", 1000);
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("a share of the device's memory (60%)"));
  }
}

// Where no total is known (a tool's --budget), a share is refused, and the message does not offer
// one as a form to use.
TEST(ParseBudget, ShareNeedsAKnownTotal) {
  try {
    parse_budget("50%", 0, "--budget");
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("--budget='50%'"));
    EXPECT_THAT(e.what(), HasSubstr("a share cannot be used"));
    EXPECT_THAT(e.what(), Not(HasSubstr("60%")));
  }
}

TEST(ParseSize, TakesZeroAndEverySizeButNoShare) {
  EXPECT_EQ(parse_size("0", "--fixed"), 0u);
  EXPECT_EQ(parse_size("0B", "--fixed"), 0u);
  EXPECT_EQ(parse_size("0 KiB", "--fixed"), 0u);
  EXPECT_EQ(parse_size("1.5MiB", "--fixed"), std::size_t{3} << 19);
  EXPECT_EQ(parse_size("2MiB", "--granularity"), std::size_t{2} << 20);
  EXPECT_EQ(parse_size("7500MB", "--fixed"), 7500000000u);
  for (const char* bad : {"", "-1", "lots", "10%", "1.2.3K", "9000000TiB"}) {
    SCOPED_TRACE(bad);
    try {
      parse_size(bad, "--granularity");
      FAIL() << "accepted";
    } catch (const ConfigError& e) {
      EXPECT_THAT(e.what(), HasSubstr("--granularity='"));
      EXPECT_THAT(e.what(), HasSubstr("is not a size"));
      EXPECT_THAT(e.what(), HasSubstr("512MiB"));
      EXPECT_THAT(e.what(), Not(HasSubstr("budget")));
    }
  }
}

TEST(WholeNumbers, AllOfTheTextOrNothing) {
  EXPECT_EQ(parse_whole_number("45"), 45);
  EXPECT_EQ(parse_whole_number("-7"), -7);
  EXPECT_EQ(parse_whole_number("0"), 0);
  // What std::stoi and std::stoll read a number from, and flags and knobs must refuse.
  for (const char* text :
       {"", " 7", "7 ", "+7", "45.5", "10%", "1e3", "10k", "x", "99999999999999999999"}) {
    EXPECT_EQ(parse_whole_number(text), std::nullopt) << text;
  }
  EXPECT_EQ(parse_unsigned_number("18446744073709551615"), UINT64_MAX);
  for (const char* text : {"", "-1", "+1", "18446744073709551616", "1.0", "2e3"}) {
    EXPECT_EQ(parse_unsigned_number(text), std::nullopt) << text;
  }
}

TEST(FormatBytes, UsesBinaryUnits) {
  EXPECT_EQ(format_bytes(17), "17 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(3 * kGiB / 2), "1.50 GiB");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.00 KiB");
  // What two decimals would round up to 1024 of a unit is one of the next.
  EXPECT_EQ(format_bytes((std::size_t{1} << 20) - 1), "1.00 MiB");
  EXPECT_EQ(format_bytes((std::size_t{1} << 20) - 6 * 1024), "1018.00 KiB");
  EXPECT_EQ(format_bytes(kGiB - 1), "1.00 GiB");
}

TEST(LogLevel, ParsesLevelsAndRejectsOthers) {
  EXPECT_EQ(parse_log_level("debug"), LogLevel::kDebug);
  EXPECT_EQ(parse_log_level("error"), LogLevel::kError);
  EXPECT_THROW(parse_log_level("verbose"), ConfigError);
}

std::string read_whole(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> files_in(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// A write that stops short (a full disk; here the process's file size limit) keeps the file as it
// was, leaves no part of the text behind, and says why.
TEST(WriteFileAtomically, AWriteThatStopsShortLeavesNothingBehind) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("monet-atomic-file-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "state.json").string();
  write_file_atomically(path, "before\n", "monet-test", "the state");

  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  rlimit small = saved;
  small.rlim_cur = std::min<rlim_t>(saved.rlim_cur, 64 << 10);
  const auto handler = std::signal(SIGXFSZ, SIG_IGN);  // a write past the limit fails, with EFBIG
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string message;
  try {
    write_file_atomically(path, std::string(1 << 20, 'x'), "monet-test", "the state");
  } catch (const ConfigError& e) {
    message = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, handler);

  EXPECT_THAT(message,
              HasSubstr("monet-test: cannot write the state to '" + path + "' (File too large)"));
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"state.json"});
  EXPECT_EQ(read_whole(path), "before\n");
  std::filesystem::remove_all(dir);
}

// Two processes saving one path at once (the workers of a launcher given one
// MONET_PREDICTOR_STATE; here two threads): each save renames a whole file of its own over it, so
// that a reader meets one writer's text whole, never a mix, a part or nothing, and no save fails.
// With one temporary name for every writer, one wrote into the other's file or renamed it away.
TEST(WriteFileAtomically, WritersAtOnceLeaveOneWholeFile) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("monet-atomic-race-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "state.json").string();
  const std::string a(256 << 10, 'a'), b(256 << 10, 'b');
  write_file_atomically(path, a, "monet-test", "the state");
  std::vector<std::string> failures(2);
  auto writer = [&](const std::string& text, std::string* failure) {
    try {
      for (int i = 0; i < 60; ++i) write_file_atomically(path, text, "monet-test", "the state");
    } catch (const ConfigError& e) {
      *failure = e.what();
    }
  };
  std::thread first(writer, std::cref(a), &failures[0]);
  std::thread second(writer, std::cref(b), &failures[1]);
  int mixed = 0;
  for (int i = 0; i < 200; ++i) {
    const std::string seen = read_whole(path);
    if (seen != a && seen != b) ++mixed;
  }
  first.join();
  second.join();
  EXPECT_EQ(failures, std::vector<std::string>(2));
  EXPECT_EQ(mixed, 0) << "reads that met neither writer's text whole";
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"state.json"});
  std::filesystem::remove_all(dir);
}

// A folder where the file should be would take the temporary file beside it and refuse the rename
// over it, after the job's first steps: it is named at once.
TEST(CheckWritable, AFolderIsNamed) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("monet-check-writable-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "state.json");
  try {
    check_writable((dir / "state.json").string(), "monet-test", "the state");
    ADD_FAILURE() << "a folder was taken for a file";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("state.json': it is a folder; name a file"));
  }
  EXPECT_EQ(files_in(dir), std::vector<std::string>{"state.json"});
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace monet
