// troika-test-scenario-rank SCENARIO...: a rank that runs the named scenarios of
// tests/integration/scenarios.h in order, printing "scenario NAME ok" after each; on the first
// failure it prints "scenario NAME failed: ..." and exits 1.

#include <cstdio>
#include <string>

#include "tests/integration/scenarios.h"
#include "troika/troika.h"

int main(int argc, char** argv) {
  auto options = troika::Options::FromEnvironment();
  if (!options.ok()) return std::fprintf(stderr, "%s\n", options.status().ToString().c_str()), 2;
  auto context = troika::Context::Init(*options);
  if (!context.ok()) return std::fprintf(stderr, "%s\n", context.status().ToString().c_str()), 1;
  for (int i = 1; i < argc; ++i) {
    absl::Status s = troika::testing::scenarios::RunScenario(argv[i], **context);
    if (!s.ok()) {
      std::printf("scenario %s failed: %s\n", argv[i], s.ToString().c_str());
      return 1;
    }
    std::printf("scenario %s ok\n", argv[i]);
    std::fflush(stdout);
  }
  return (*context)->Shutdown().ok() ? 0 : 1;
}
