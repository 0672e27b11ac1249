// Errors: library code throws zt::Error (never exit()). CHECK macros add file and line.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace zt {

// The kind decides the process exit code in main: bad user input exits 2.
enum class ErrorKind { Internal, BadInput, Unsupported, Io };

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string message) : std::runtime_error(std::move(message)), kind_(kind) {}
  ErrorKind kind() const { return kind_; }
  int exit_code() const { return kind_ == ErrorKind::Internal ? 1 : 2; }

 private:
  ErrorKind kind_;
};

namespace detail {
inline void append_all(std::ostringstream&) {}
template <class T, class... Rest>
void append_all(std::ostringstream& os, const T& first, const Rest&... rest) {
  os << first;
  append_all(os, rest...);
}
}  // namespace detail

// Builds a message from any streamable pieces: str("bad dim ", d, " in ", name).
template <class... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  detail::append_all(os, args...);
  return os.str();
}

[[noreturn]] void throw_check_failure(const char* file, int line, const char* expr, const std::string& message);

}  // namespace zt

// Internal invariant: failure means a bug in zerotrain.
#define ZT_CHECK(cond, ...)                                                                    \
  do {                                                                                         \
    if (!(cond)) ::zt::throw_check_failure(__FILE__, __LINE__, #cond, ::zt::str(__VA_ARGS__)); \
  } while (0)

// User-facing errors: bad input (exit code 2), with a message naming the thing and the fix.
#define ZT_THROW_INPUT(...) throw ::zt::Error(::zt::ErrorKind::BadInput, ::zt::str(__VA_ARGS__))
#define ZT_THROW_UNSUPPORTED(...) throw ::zt::Error(::zt::ErrorKind::Unsupported, ::zt::str(__VA_ARGS__))
#define ZT_THROW_IO(...) throw ::zt::Error(::zt::ErrorKind::Io, ::zt::str(__VA_ARGS__))
