#include "app/args.h"

#include <gtest/gtest.h>

namespace hc {
namespace {

struct Flags {
  std::string model;
  std::string prompt = "hello";
  int n_predict = 128;
  uint64_t seed = 42;
  float temp = 0.8f;
  bool verbose = false;
  std::string input;
};

ArgParser make_parser(Flags* f) {
  ArgParser p("run", "Generate text.");
  p.add_string("-m,--model", &f->model, "model file");
  p.add_string("-p,--prompt", &f->prompt, "prompt text");
  p.add_int("-n,--n-predict", &f->n_predict, "tokens to generate");
  p.add_u64("--seed", &f->seed, "random seed");
  p.add_float("--temp", &f->temp, "temperature");
  p.add_flag("-v,--verbose", &f->verbose, "more logging");
  return p;
}

TEST(ArgParser, SpaceAndEqualsForms) {
  Flags f;
  ArgParser p = make_parser(&f);
  ASSERT_TRUE(p.parse({"-m", "a.gguf", "--temp=0.5", "-n", "-1", "--seed=7", "-v",
                       "--prompt=x=y"})
                  .ok());
  EXPECT_EQ(f.model, "a.gguf");
  EXPECT_FLOAT_EQ(f.temp, 0.5f);
  EXPECT_EQ(f.n_predict, -1);
  EXPECT_EQ(f.seed, 7u);
  EXPECT_TRUE(f.verbose);
  EXPECT_EQ(f.prompt, "x=y");  // only the first '=' separates
  EXPECT_FALSE(p.help_requested());
}

TEST(ArgParser, ValueMayStartWithDashAndLastOccurrenceWins) {
  Flags f;
  ArgParser p = make_parser(&f);
  ASSERT_TRUE(p.parse({"-p", "--not-a-flag", "--temp", "-0.25", "-p", "second"}).ok());
  EXPECT_EQ(f.prompt, "second");
  EXPECT_FLOAT_EQ(f.temp, -0.25f);
}

TEST(ArgParser, EmptyValueIsAValue) {
  Flags f;
  ArgParser p = make_parser(&f);
  ASSERT_TRUE(p.parse({"-p", ""}).ok());
  EXPECT_EQ(f.prompt, "");
  ASSERT_TRUE(p.parse({"--prompt="}).ok());
  EXPECT_EQ(f.prompt, "");
}

TEST(ArgParser, MalformedNumbersNameFlagAndValue) {
  Flags f;
  ArgParser p = make_parser(&f);
  Status st = p.parse({"--temp", "abc"});
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(), "--temp: expected a number, found 'abc'");
  st = p.parse({"-n", "12x"});
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(), "-n: expected an integer, found '12x'");
  st = p.parse({"-n", "99999999999"});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("32-bit"), std::string::npos) << st.message();
  st = p.parse({"--seed=-3"});
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(), "--seed: expected a non-negative integer, found '-3'");
  st = p.parse({"--temp", "nan"});
  ASSERT_FALSE(st.ok());
  st = p.parse({"--temp", "1e999"});
  ASSERT_FALSE(st.ok());
  st = p.parse({"--temp", ""});
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(), "--temp: expected a number, found ''");
  EXPECT_FLOAT_EQ(f.temp, 0.8f);  // failed parses leave the value alone
}

TEST(ArgParser, UnknownFlagPointsAtHelp) {
  Flags f;
  ArgParser p = make_parser(&f);
  Status st = p.parse({"--foo"});
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(), "unknown flag '--foo' for 'hotcold run'; see 'hotcold run --help'");
  st = p.parse({"--foo=3"});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("unknown flag '--foo'"), std::string::npos) << st.message();
}

TEST(ArgParser, MissingValueAndValueOnSwitch) {
  Flags f;
  ArgParser p = make_parser(&f);
  Status st = p.parse({"-m"});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("-m: expected a value"), std::string::npos) << st.message();
  st = p.parse({"--verbose=1"});
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(), "--verbose: takes no value, found '1'");
}

TEST(ArgParser, Positionals) {
  std::string in, out;
  bool force = false;
  ArgParser p("hotcold copy", "");
  p.add_positional("IN", &in, true, "input");
  p.add_positional("OUT", &out, false, "output");
  p.add_flag("-f", &force, "force");
  ASSERT_TRUE(p.parse({"a", "-f", "b"}).ok());
  EXPECT_EQ(in, "a");
  EXPECT_EQ(out, "b");
  EXPECT_TRUE(force);

  std::string in2, out2;
  ArgParser q("copy", "");
  q.add_positional("IN", &in2, true, "input");
  q.add_positional("OUT", &out2, false, "output");
  Status st = q.parse({});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("missing required argument <IN> for 'hotcold copy'"),
            std::string::npos)
      << st.message();
  st = q.parse({"a", "b", "c"});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("unexpected argument 'c'"), std::string::npos) << st.message();
  // "--" ends flags; "-" alone is a positional (stdin by convention).
  ASSERT_TRUE(q.parse({"--", "-x"}).ok());
  EXPECT_EQ(in2, "-x");
  ASSERT_TRUE(q.parse({"-"}).ok());
  EXPECT_EQ(in2, "-");
}

TEST(ArgParser, HelpSkipsRequiredChecks) {
  std::string in;
  ArgParser p("inspect", "Show things.");
  p.add_positional("MODEL", &in, true, "model");
  ASSERT_TRUE(p.parse({"--help"}).ok());
  EXPECT_TRUE(p.help_requested());
  ArgParser q("inspect", "Show things.");
  q.add_positional("MODEL", &in, true, "model");
  ASSERT_TRUE(q.parse({"-h"}).ok());
  EXPECT_TRUE(q.help_requested());
}

TEST(ArgParser, UsageListsFlagsHelpAndDefaults) {
  Flags f;
  ArgParser p = make_parser(&f);
  const std::string u = p.usage();
  EXPECT_NE(u.find("usage: hotcold run [options]"), std::string::npos) << u;
  EXPECT_NE(u.find("Generate text."), std::string::npos);
  EXPECT_NE(u.find("-m, --model STR"), std::string::npos) << u;
  EXPECT_NE(u.find("--temp F"), std::string::npos) << u;
  EXPECT_NE(u.find("temperature (default: 0.8)"), std::string::npos) << u;
  EXPECT_NE(u.find("tokens to generate (default: 128)"), std::string::npos) << u;
  EXPECT_NE(u.find("prompt text (default: hello)"), std::string::npos) << u;
  EXPECT_NE(u.find("-v, --verbose"), std::string::npos) << u;
  EXPECT_NE(u.find("-h, --help"), std::string::npos) << u;
}

}  // namespace
}  // namespace hc
