// Copyright trainprof authors. SPDX-License-Identifier: Apache-2.0
// Numbers and strings appended to bytes and read back, for messages between the
// processes of one job (the same build at both ends: native byte order, fixed
// widths, strings length-first). Every read checks what is left, so damaged
// bytes fail a read rather than read out of bounds.
#ifndef TRAINPROF_BASE_BYTE_BUFFER_H_
#define TRAINPROF_BASE_BYTE_BUFFER_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

namespace trainprof::base {

class ByteWriter {
 public:
  explicit ByteWriter(std::string* out) : out_(out) {}
  template <typename T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_->append(reinterpret_cast<const char*>(&v), sizeof(v));
  }
  void put(const std::string& s) { put(std::string_view(s)); }
  void put(std::string_view s) {
    put<uint64_t>(s.size());
    out_->append(s);
  }

 private:
  std::string* out_;
};

class ByteReader {
 public:
  explicit ByteReader(std::string_view in) : in_(in) {}
  template <typename T>
  [[nodiscard]] bool get(T* v) {
    static_assert(std::is_trivially_copyable_v<T> && !std::is_same_v<T, std::string_view>);
    if (in_.size() < sizeof(T)) return false;
    std::memcpy(v, in_.data(), sizeof(T));
    in_.remove_prefix(sizeof(T));
    return true;
  }
  [[nodiscard]] bool get(std::string* s) {
    uint64_t n = 0;
    if (!get(&n) || n > in_.size()) return false;
    s->assign(in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  // A view of the string in the bytes read: valid as long as they are.
  [[nodiscard]] bool get(std::string_view* s) {
    uint64_t n = 0;
    if (!get(&n) || n > in_.size()) return false;
    *s = in_.substr(0, n);
    in_.remove_prefix(n);
    return true;
  }
  // A count of items of at least `item_bytes` each: false when the bytes
  // left could not hold that many (a damaged count never sizes a vector).
  [[nodiscard]] bool count(size_t item_bytes, uint64_t* n) { return get(n) && *n <= in_.size() / item_bytes; }
  bool empty() const { return in_.empty(); }
  std::string_view rest() const { return in_; }

 private:
  std::string_view in_;
};

}  // namespace trainprof::base

#endif  // TRAINPROF_BASE_BYTE_BUFFER_H_
