// CHECK(cond) << "message": a broken invariant (a bug, not bad input). Prints file:line and
// aborts. Expected failures use Status instead (core/status.h).
#pragma once

#include <sstream>

namespace kvserve::internal {

class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  [[noreturn]] ~CheckFailure();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

// Lets `CHECK(x) << ...` be a void expression in both branches of the ternary.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace kvserve::internal

#define CHECK(cond)                                  \
  (cond) ? (void)0                                   \
         : ::kvserve::internal::Voidify() &          \
               ::kvserve::internal::CheckFailure(__FILE__, __LINE__, #cond).stream()

#define CHECK_EQ(a, b) CHECK((a) == (b)) << #a " = " << (a) << ", " #b " = " << (b) << " "
#define CHECK_NE(a, b) CHECK((a) != (b)) << #a " = " << (a) << ", " #b " = " << (b) << " "
#define CHECK_LT(a, b) CHECK((a) < (b)) << #a " = " << (a) << ", " #b " = " << (b) << " "
#define CHECK_LE(a, b) CHECK((a) <= (b)) << #a " = " << (a) << ", " #b " = " << (b) << " "
#define CHECK_GT(a, b) CHECK((a) > (b)) << #a " = " << (a) << ", " #b " = " << (b) << " "
#define CHECK_GE(a, b) CHECK((a) >= (b)) << #a " = " << (a) << ", " #b " = " << (b) << " "

#ifdef NDEBUG
#define DCHECK(cond) \
  while (false) CHECK(cond)
#else
#define DCHECK(cond) CHECK(cond)
#endif
