// Test support: puts every SIMD target back when a test that pins one at a time
// (hwy::SetSupportedTargetsForTest) ends, also when a failed ASSERT leaves it early. Without
// it the rest of that test binary's run would dispatch to the last pinned target only and check
// that target's code instead of the machine's (ctest runs each test in its own process; a
// developer running the whole binary does not).
#pragma once

#include <hwy/targets.h>

namespace kvserve::testing {

// Declare one before the loop over hwy::SupportedAndGeneratedTargets().
class SimdTargetReset {
 public:
  SimdTargetReset() = default;
  SimdTargetReset(const SimdTargetReset&) = delete;
  SimdTargetReset& operator=(const SimdTargetReset&) = delete;
  ~SimdTargetReset() {
    hwy::SetSupportedTargetsForTest(0);
    hwy::SupportedTargets();  // refreshes the dispatch choice
  }
};

}  // namespace kvserve::testing
