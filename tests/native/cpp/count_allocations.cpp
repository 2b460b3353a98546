// Counts every operator new of the unit-test process (tests/native/cpp/unit_tests.cpp
// checks that the JIT key's hot path allocates nothing). A separate translation
// unit, so no allocation in the tests is inlined against these definitions.
#include <atomic>
#include <cstdlib>
#include <new>

std::atomic<long> kir_test_allocations{0};

void* operator new(std::size_t size) {
  ++kir_test_allocations;
  if (void* p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) { return operator new(size); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
