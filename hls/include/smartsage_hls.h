// The subset of the Vitis HLS headers (ap_int.h, hls_stream.h) that the smartsage kernel uses,
// written for this project so that the kernel source compiles with plain g++ (C simulation).
//
// Under Vitis HLS (__SYNTHESIS__ or SMARTSAGE_VENDOR_HLS defined) the vendor headers are used instead;
// the kernel only relies on behaviour both provide:
//   ap_uint<N>  (1 <= N <= 64): unsigned, arithmetic wraps modulo 2^N on assignment, implicit
//               conversion to a 64-bit integer, bit select x[i], range x.range(hi, lo);
//   hls::stream<T>: blocking FIFO with read(), write(), empty(); in C simulation it is unbounded,
//               exactly like the vendor model (dataflow processes run one after the other).
#pragma once

#if defined(__SYNTHESIS__) || defined(SMARTSAGE_VENDOR_HLS)
#include <ap_int.h>
#include <hls_stream.h>
#else

#include <stdint.h>

#include <deque>
#include <stdexcept>

template <int N>
class ap_uint {
    static_assert(N >= 1 && N <= 64, "this ap_uint subset supports 1 to 64 bits");

public:
    static constexpr uint64_t kMask = N == 64 ? ~uint64_t(0) : ((uint64_t(1) << (N % 64)) - 1);

    constexpr ap_uint() : value_(0) {}
    constexpr ap_uint(uint64_t value) : value_(value & kMask) {}  // NOLINT: implicit, as in ap_int.h
    template <int M>
    constexpr ap_uint(const ap_uint<M>& other) : value_(uint64_t(other) & kMask) {}

    constexpr operator uint64_t() const { return value_; }

    ap_uint& operator=(uint64_t value) {
        value_ = value & kMask;
        return *this;
    }
    ap_uint& operator+=(uint64_t value) { return *this = value_ + value; }
    ap_uint& operator-=(uint64_t value) { return *this = value_ - value; }
    ap_uint& operator*=(uint64_t value) { return *this = value_ * value; }
    ap_uint& operator^=(uint64_t value) { return *this = value_ ^ value; }
    ap_uint& operator|=(uint64_t value) { return *this = value_ | value; }
    ap_uint& operator&=(uint64_t value) { return *this = value_ & value; }
    ap_uint& operator>>=(int shift) { return *this = value_ >> shift; }
    ap_uint& operator<<=(int shift) { return *this = value_ << shift; }
    ap_uint& operator++() { return *this = value_ + 1; }

    // Bit select (read only in this subset).
    constexpr bool operator[](int bit) const { return (value_ >> bit) & 1u; }

    // Bits hi..lo inclusive, as an unsigned value.
    constexpr uint64_t range(int hi, int lo) const {
        return hi - lo + 1 >= 64 ? value_ >> lo : (value_ >> lo) & ((uint64_t(1) << (hi - lo + 1)) - 1);
    }

private:
    uint64_t value_;
};

namespace hls {

// Unbounded FIFO with the blocking-read contract of hls::stream: reading an empty stream in C
// simulation is a design error (a dataflow process consumed more than its producer wrote).
template <typename T>
class stream {
public:
    stream() = default;
    explicit stream(const char* /*name*/) {}
    stream(const stream&) = delete;
    stream& operator=(const stream&) = delete;

    void write(const T& value) { fifo_.push_back(value); }
    T read() {
        if (fifo_.empty()) throw std::logic_error("hls::stream read while empty (dataflow deadlock)");
        T value = fifo_.front();
        fifo_.pop_front();
        return value;
    }
    bool empty() const { return fifo_.empty(); }
    bool full() const { return false; }
    std::size_t size() const { return fifo_.size(); }

private:
    std::deque<T> fifo_;
};

}  // namespace hls

#endif

// HLS directives. g++ warns about (and -Werror rejects) unknown `#pragma HLS` lines and GCC 12 cannot
// silence that warning locally, so the kernel writes its directives as SMARTSAGE_HLS(PIPELINE II=1):
// under Vitis HLS this is `_Pragma("HLS PIPELINE II=1")`, which Vitis treats exactly like
// `#pragma HLS PIPELINE II=1`; under g++ it is nothing.
#if defined(__SYNTHESIS__) || defined(SMARTSAGE_VENDOR_HLS)
#define SMARTSAGE_HLS_STRINGIFY(text) #text
#define SMARTSAGE_HLS(directive) _Pragma(SMARTSAGE_HLS_STRINGIFY(HLS directive))
#define SMARTSAGE_PREFETCH(address)
#define SMARTSAGE_CSIM_UNROLL
#else
#define SMARTSAGE_HLS(directive)
// A cache hint for the C simulation only (stands in for a read issued ahead of its use).
#define SMARTSAGE_PREFETCH(address) __builtin_prefetch(address)
// g++ -O2 leaves small constant-trip loops rolled; unrolled, a byte loop becomes one load or store.
#define SMARTSAGE_CSIM_UNROLL _Pragma("GCC unroll 8")
#endif
