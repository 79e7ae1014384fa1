// Status / Result: every error from outside (files, flags, requests, metadata) is returned,
// never thrown through the library and never exit()ed. HC_CHECK is for programming bugs only.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace hc {

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Error(std::string msg) {
    Status s;
    s.ok_ = false;
    s.msg_ = std::move(msg);
    return s;
  }
  bool ok() const { return ok_; }
  const std::string& message() const { return msg_; }
  // Prefixes context ("loading tensor blk.0.ffn_up.weight: ...") while keeping the cause.
  Status with_context(const std::string& ctx) const {
    return ok_ ? *this : Error(ctx + ": " + msg_);
  }

 private:
  bool ok_ = true;
  std::string msg_;
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status st) : v_(std::move(st)) {    // NOLINT(google-explicit-constructor)
    if (std::get<Status>(v_).ok()) v_ = Status::Error("internal: Result built from OK status");
  }
  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }
  const std::string& message() const {
    static const std::string empty;
    return ok() ? empty : std::get<Status>(v_).message();
  }
  T& value() & { check(); return std::get<T>(v_); }
  const T& value() const& { check(); return std::get<T>(v_); }
  T&& value() && { check(); return std::move(std::get<T>(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  void check() const {
    if (!ok()) {
      std::fprintf(stderr, "hotcold: Result::value() on error: %s\n",
                   std::get<Status>(v_).message().c_str());
      std::abort();
    }
  }
  std::variant<T, Status> v_;
};

}  // namespace hc

#define HC_CONCAT_INNER(a, b) a##b
#define HC_CONCAT(a, b) HC_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` (a Status) failed.
#define HC_TRY(expr)                      \
  do {                                    \
    ::hc::Status hc_st_ = (expr);         \
    if (!hc_st_.ok()) return hc_st_;      \
  } while (0)

// HC_ASSIGN_OR_RETURN(auto x, make_x()); — unwraps a Result or returns its Status.
#define HC_ASSIGN_OR_RETURN(lhs, rexpr) \
  HC_ASSIGN_OR_RETURN_IMPL(HC_CONCAT(hc_res_, __LINE__), lhs, rexpr)
#define HC_ASSIGN_OR_RETURN_IMPL(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                             \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()

// Always-on invariant check for programming bugs (never for bad input).
#define HC_CHECK(cond)                                                              \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "hotcold: HC_CHECK failed at %s:%d: %s\n", __FILE__,    \
                   __LINE__, #cond);                                                \
      std::abort();                                                                 \
    }                                                                               \
  } while (0)
