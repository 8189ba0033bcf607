// runner.cpp — hands every C test body (RAP_TEST) to GoogleTest, so ctest and gtest list each
// case by name. The bodies run in C; a failed check ends the body and becomes a gtest failure.
#include <gtest/gtest.h>

#include "c/rap_test.h"

namespace {

class CBody : public testing::Test {
 public:
  explicit CBody(size_t index) : index_(index) {}
  void TestBody() override {
    char msg[2048];
    const char *file = nullptr;
    int line = 0;
    int r = rap_test_run_at(index_, msg, sizeof msg, &file, &line);
    if (r == 2) GTEST_SKIP() << msg;
    if (r == 1) ADD_FAILURE_AT(file ? file : "?", line) << msg;
  }

 private:
  size_t index_;
};

}  // namespace

int main(int argc, char **argv) {
  testing::InitGoogleTest(&argc, argv);
  for (size_t i = 0; i < rap_test_count(); i++) {
    const char *suite, *name, *file;
    rap_test_fn fn;
    int line;
    rap_test_get(i, &suite, &name, &fn, &file, &line);   // fn is NULL for parameterised cases
    testing::RegisterTest(suite, name, nullptr, nullptr, file, line,
                          [i]() -> testing::Test * { return new CBody(i); });
  }
  return RUN_ALL_TESTS();
}
