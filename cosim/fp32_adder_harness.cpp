// Verilator harness for smartsage.rtl.fp32_adder.Fp32Adder (exported with tag_width 16).
//
// Usage: fp32_adder_harness LATENCY PAIRS_IN SUMS_OUT BUBBLE_MASK SEED
//
// PAIRS_IN holds N operand pairs as little-endian uint32 (a0, b0, a1, b1, ...). The harness feeds
// one pair per cycle, except that a cycle whose xorshift draw has (draw & BUBBLE_MASK) == 0 is a
// bubble (valid low, random operands: nothing may come out of it). Pair k carries tag k mod 2^16.
// It checks, in C++ and without any Python per cycle, that every result leaves exactly LATENCY
// cycles after its pair entered, in order, with its tag, and that no other beat is valid; it
// writes the N sums (uint32, little-endian) to SUMS_OUT and prints "pairs N cycles C seconds S".
// Exit status 0: all protocol checks passed (the values are compared by the Python caller);
// 1: a protocol error (printed); 2: bad usage or I/O.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <vector>

#include "Vfp32_adder.h"
#include "verilated.h"

// Verilator escapes the double underscore of Amaranth's port names (i__valid -> i___05Fvalid).
#define IN_VALID i___05Fvalid
#define IN_PAYLOAD i___05Fpayload
#define OUT_VALID o___05Fvalid
#define OUT_PAYLOAD o___05Fpayload

namespace {

uint64_t xorshift64(uint64_t &state) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
}

struct InFlight {
    uint64_t index;
    uint64_t cycle;
};

}  // namespace

int main(int argc, char **argv) {
    if (argc != 6) {
        std::fprintf(stderr, "usage: %s LATENCY PAIRS_IN SUMS_OUT BUBBLE_MASK SEED\n", argv[0]);
        return 2;
    }
    const uint64_t latency = std::strtoull(argv[1], nullptr, 10);
    const uint64_t bubble_mask = std::strtoull(argv[4], nullptr, 0);
    uint64_t rng = std::strtoull(argv[5], nullptr, 0) | 1;  // xorshift state must be nonzero

    std::FILE *in = std::fopen(argv[2], "rb");
    if (!in) {
        std::perror(argv[2]);
        return 2;
    }
    std::fseek(in, 0, SEEK_END);
    const long bytes = std::ftell(in);
    std::fseek(in, 0, SEEK_SET);
    if (bytes < 0 || bytes % 8 != 0) {
        std::fprintf(stderr, "%s: size %ld is not a whole number of operand pairs\n", argv[2], bytes);
        return 2;
    }
    const uint64_t n = static_cast<uint64_t>(bytes) / 8;
    std::vector<uint32_t> pairs(2 * n);
    if (n && std::fread(pairs.data(), 8, n, in) != n) {
        std::fprintf(stderr, "%s: short read\n", argv[2]);
        return 2;
    }
    std::fclose(in);
    std::vector<uint32_t> sums(n, 0);

    auto context = std::make_unique<VerilatedContext>();
    auto top = std::make_unique<Vfp32_adder>(context.get());
    top->clk = 0;
    top->rst = 1;
    top->IN_VALID = 0;
    top->eval();
    for (int k = 0; k < 2; ++k) {
        top->clk = 1;
        top->eval();
        top->clk = 0;
        top->eval();
    }
    top->rst = 0;
    top->eval();

    std::deque<InFlight> in_flight;
    uint64_t issued = 0, received = 0, cycle = 0, errors = 0;
    const uint64_t cycle_limit = 4 * n + latency + 64;  // bubbles average at most half of the cycles
    const auto start = std::chrono::steady_clock::now();
    while (received < n && cycle < cycle_limit) {
        const uint64_t draw = xorshift64(rng);
        const bool bubble = issued == n || (bubble_mask != 0 && (draw & bubble_mask) == 0);
        if (bubble) {
            top->IN_VALID = 0;
            top->IN_PAYLOAD[0] = static_cast<uint32_t>(draw);
            top->IN_PAYLOAD[1] = static_cast<uint32_t>(draw >> 32);
            top->IN_PAYLOAD[2] = static_cast<uint32_t>(draw >> 17) & 0xFFFFu;
        } else {
            top->IN_VALID = 1;
            top->IN_PAYLOAD[0] = pairs[2 * issued];
            top->IN_PAYLOAD[1] = pairs[2 * issued + 1];
            top->IN_PAYLOAD[2] = static_cast<uint32_t>(issued & 0xFFFFu);
            in_flight.push_back({issued, cycle});
            ++issued;
        }
        top->clk = 1;
        top->eval();
        // Registered outputs after rising edge `cycle`: a pair set up before edge c leaves after
        // edge c + latency - 1.
        if (top->OUT_VALID) {
            const uint64_t payload = top->OUT_PAYLOAD;
            const uint32_t sum = static_cast<uint32_t>(payload);
            const uint32_t tag = static_cast<uint32_t>(payload >> 32) & 0xFFFFu;
            if (in_flight.empty()) {
                if (errors++ < 10)
                    std::fprintf(stderr, "cycle %llu: valid result with nothing in flight\n",
                                 static_cast<unsigned long long>(cycle));
            } else {
                const InFlight head = in_flight.front();
                in_flight.pop_front();
                if (cycle != head.cycle + latency - 1 && errors++ < 10)
                    std::fprintf(stderr, "pair %llu: result after %llu cycles, expected %llu\n",
                                 static_cast<unsigned long long>(head.index),
                                 static_cast<unsigned long long>(cycle - head.cycle + 1),
                                 static_cast<unsigned long long>(latency));
                if (tag != (head.index & 0xFFFFu) && errors++ < 10)
                    std::fprintf(stderr, "pair %llu: tag %u, expected %llu\n",
                                 static_cast<unsigned long long>(head.index), tag,
                                 static_cast<unsigned long long>(head.index & 0xFFFFu));
                sums[head.index] = sum;
                ++received;
            }
        } else if (!in_flight.empty() && cycle >= in_flight.front().cycle + latency - 1) {
            if (errors++ < 10)
                std::fprintf(stderr, "pair %llu: no result after %llu cycles\n",
                             static_cast<unsigned long long>(in_flight.front().index),
                             static_cast<unsigned long long>(latency));
            in_flight.pop_front();
            ++received;  // counted as lost so the loop ends
        }
        top->clk = 0;
        top->eval();
        ++cycle;
    }
    // A few idle cycles after the last result: nothing else may come out.
    top->IN_VALID = 0;
    for (uint64_t k = 0; k < latency + 4; ++k) {
        top->clk = 1;
        top->eval();
        if (top->OUT_VALID && errors++ < 10) std::fprintf(stderr, "spurious valid result after the last pair\n");
        top->clk = 0;
        top->eval();
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    top->final();
    if (received < n) {
        std::fprintf(stderr, "only %llu of %llu results after %llu cycles\n",
                     static_cast<unsigned long long>(received), static_cast<unsigned long long>(n),
                     static_cast<unsigned long long>(cycle));
        ++errors;
    }

    std::FILE *out = std::fopen(argv[3], "wb");
    if (!out) {
        std::perror(argv[3]);
        return 2;
    }
    if (n && std::fwrite(sums.data(), 4, n, out) != n) {
        std::fprintf(stderr, "%s: short write\n", argv[3]);
        return 2;
    }
    std::fclose(out);
    std::printf("pairs %llu cycles %llu seconds %.6f\n", static_cast<unsigned long long>(n),
                static_cast<unsigned long long>(cycle), seconds);
    return errors ? 1 : 0;
}
