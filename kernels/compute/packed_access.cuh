#pragma once
// Visits a span of T in global memory with 16-byte loads and stores wherever its alignment
// allows: an unaligned head of single elements, then whole 16-byte packs, then a tail. A row of
// logits [rows, vocab] starts at any element offset when vocab is odd, so the head is what lets
// every row after the first be read in packs. Kernels whose rows are all aligned or all not
// (the row length a multiple of the pack or not) choose once per launch instead, through Elements.
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <type_traits>

namespace sweetspot::gpu {

// How the packs are loaded and stored. `streaming` marks them evict-first (ld.global.cs,
// st.global.cs): for a last read of data and a write nothing reads soon, so that they do not push
// out of L2 what other blocks are about to read again.
enum class Caching { normal, streaming };

template <class T>
struct alignas(16) Pack {
    static constexpr int kSize = 16 / static_cast<int>(sizeof(T));
    T v[kSize];
};

// N consecutive elements moved as one access: a Pack<T>'s 16 bytes (N = Pack<T>::kSize) where
// the buffers allow, one element (N = 1) where they do not, so that a kernel templated on N has
// one body for both paths.
template <class T, int N>
struct alignas(sizeof(T) * N) Elements {
    T v[N];
};

// Whether every buffer starts on 16 bytes, as Pack<T> loads and stores need.
inline bool all_on_16_bytes(std::initializer_list<const void*> buffers) {
    for (const void* b : buffers)
        if (reinterpret_cast<std::uintptr_t>(b) % 16 != 0) return false;
    return true;
}

// Calls f(i, value) once for each of x's n elements, value a T& to a copy in registers. Thread
// `thread` of `threads` takes elements (and packs) thread, thread + threads, ... of each part, so
// a block that visits the same span twice gives each thread the same elements both times. When E
// is not const, what f leaves in value is stored back.
template <Caching kCaching = Caching::normal, class E, class F>
__device__ __forceinline__ void for_each_packed(E* x, std::int64_t n, std::int64_t thread, std::int64_t threads, F f) {
    using T = std::remove_const_t<E>;
    using P = std::conditional_t<std::is_const_v<E>, const Pack<T>, Pack<T>>;
    constexpr int k = Pack<T>::kSize;
    const auto misaligned = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(x) % 16 / sizeof(T));
    const std::int64_t head = misaligned == 0 ? 0 : (n < k - misaligned ? n : k - misaligned);
    const std::int64_t packs = (n - head) / k;
    const auto element = [&](std::int64_t i) {
        T value = x[i];
        f(i, value);
        if constexpr (!std::is_const_v<E>) x[i] = value;
    };
    for (std::int64_t i = thread; i < head; i += threads) element(i);
    P* body = reinterpret_cast<P*>(x + head);
    for (std::int64_t p = thread; p < packs; p += threads) {
        Pack<T> pack;
        if constexpr (kCaching == Caching::streaming) {
            const int4 bits = __ldcs(reinterpret_cast<const int4*>(body + p));
            std::memcpy(&pack, &bits, sizeof pack);
        } else {
            pack = body[p];
        }
#pragma unroll
        for (int j = 0; j < k; ++j) f(head + p * k + j, pack.v[j]);
        if constexpr (!std::is_const_v<E>) {
            if constexpr (kCaching == Caching::streaming) {
                int4 bits;
                std::memcpy(&bits, &pack, sizeof bits);
                __stcs(reinterpret_cast<int4*>(body + p), bits);
            } else {
                body[p] = pack;
            }
        }
    }
    for (std::int64_t i = head + packs * k + thread; i < n; i += threads) element(i);
}

}  // namespace sweetspot::gpu
