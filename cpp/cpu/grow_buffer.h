// Grow-only host buffers: they keep their memory across calls and count their
// reallocations, so a warm call allocates nothing (and tests can check it).
#pragma once
#include <algorithm>
#include <cstddef>
#include <memory>
#include <vector>

namespace splat::cpu {

template <class T>
class GrowBuffer {
 public:
  // A pointer to at least n elements (contents are unspecified after growth).
  T* ensure(size_t n, size_t& allocation_counter) {
    if (n > capacity_) {
      size_t cap = capacity_ + capacity_ / 2;
      if (cap < n) cap = n;
      data_.reset(new T[cap]);
      capacity_ = cap;
      ++allocation_counter;
    }
    return data_.get();
  }
  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  size_t capacity() const { return capacity_; }

 private:
  std::unique_ptr<T[]> data_;
  size_t capacity_ = 0;
};

// resize() that counts a reallocation when the capacity grows (by half again at least).
template <class T>
void grow_vector(std::vector<T>& v, size_t n, size_t& allocation_counter) {
  if (n > v.capacity()) {
    v.reserve(std::max(n, v.capacity() + v.capacity() / 2));
    ++allocation_counter;
  }
  v.resize(n);
}

}  // namespace splat::cpu
