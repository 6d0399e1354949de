// smartsage near-storage sampling kernel: Vitis-HLS-style C++ implementation of docs/spec.md.
//
// Structure (one command = one mini-batch):
//   run_core            reads the descriptor and the image header, checks them (spec section 5, steps
//                       1 and 2), then runs one dataflow region per hop (step 3 before each) and writes
//                       the result header last.
//   hop_dataflow        read_frontier -> fetch_degrees -> sample_frontier -> aggregate_frontier ->
//                       write_results, joined by hls::stream FIFOs. The aggregate stage is active in
//                       the last hop of an AGGREGATE command (it writes the self and sum rows through
//                       its own master) and passes node and neighbor tokens through.
// Every stage stops at its own first error, drains its input and forwards an END token carrying the
// error; a stage's own error wins over the one it receives (it concerns an earlier frontier entry),
// except FEATURES_CAPACITY (step 5), which loses to any error of the hop (step 4).
//
// Bus model: every access goes through a window [0, size) of its port. In C simulation the sizes are
// the arrays' sizes, so an address outside them is a bus error (STORAGE_ERROR for a read, OUTPUT_ERROR
// for a write, error_value = the first byte address outside the window), as a DECERR of the
// interconnect, and never an access outside the arrays. The Vitis top passes the full 64-bit address
// space (the interconnect decodes).
#include "smartsage_kernel.h"

#include <string.h>

// Loop labels name the loops in Vitis HLS reports; g++ sees labels no goto uses.
#pragma GCC diagnostic ignored "-Wunused-label"

#include <exception>
#include <vector>

namespace smartsage {
namespace {

constexpr uint64_t kAllOnes = ~uint64_t(0);

// ------------------------------------------------------------------------------------------ errors

// The error fields of a result header; status 0 means none.
struct Fault {
    uint32_t status;
    uint32_t hop;
    uint64_t index;
    uint64_t value;
};

constexpr Fault kNoFault = {SMARTSAGE_STATUS_OK, 0, 0, 0};

inline Fault fault(uint32_t status, uint32_t hop, uint64_t index, uint64_t value) {
    return Fault{status, hop, index, value};
}

// --------------------------------------------------------------------------------------- bus access

// True when [base + offset, base + offset + bytes) lies inside [0, size), with no wrap-around.
inline bool in_window(uint64_t base, uint64_t offset, uint64_t bytes, uint64_t size) {
    return base <= size && offset <= size - base && bytes <= size - base - offset;
}

// index * width, saturating (an offset that saturates lies outside every window).
inline uint64_t scaled(uint64_t index, uint64_t width) {
    return index > kAllOnes / width ? kAllOnes : index * width;
}

// base + offset, saturating (an address that saturates lies outside every window).
inline uint64_t address_of(uint64_t base, uint64_t offset) {
    return offset > kAllOnes - base ? kAllOnes : base + offset;
}

// The address a failing access reports: the first byte of it outside the window [0, size), that is
// the access's own address when it starts outside, else the window's end.
inline uint64_t fault_address(uint64_t base, uint64_t offset, uint64_t size) {
    const uint64_t addr = address_of(base, offset);
    return addr > size ? addr : size;
}

// Little-endian load / store of BYTES bytes at `addr`; the caller checked the window. The byte loops
// are unrolled: Vitis widens them into one bus word, g++ combines them into one load or store.
template <unsigned BYTES>
inline uint64_t load_fixed(const uint8_t* port, uint64_t addr) {
    uint64_t value = 0;
load_bytes:
    SMARTSAGE_CSIM_UNROLL
    for (unsigned b = 0; b < BYTES; ++b) {
        SMARTSAGE_HLS(UNROLL)
        value |= uint64_t(port[addr + b]) << (8 * b);
    }
    return value;
}

template <unsigned BYTES>
inline void store_fixed(uint8_t* port, uint64_t addr, uint64_t value) {
store_bytes:
    SMARTSAGE_CSIM_UNROLL
    for (unsigned b = 0; b < BYTES; ++b) {
        SMARTSAGE_HLS(UNROLL)
        port[addr + b] = uint8_t(value >> (8 * b));
    }
}

// `bytes` is 1, 2, 4 or 8 (element widths of the formats).
inline uint64_t load_le(const uint8_t* port, uint64_t addr, unsigned bytes) {
    switch (bytes) {
        case 1: return load_fixed<1>(port, addr);
        case 2: return load_fixed<2>(port, addr);
        case 4: return load_fixed<4>(port, addr);
        default: return load_fixed<8>(port, addr);
    }
}

inline void store_le(uint8_t* port, uint64_t addr, uint64_t value, unsigned bytes) {
    switch (bytes) {
        case 1: store_fixed<1>(port, addr, value); break;
        case 2: store_fixed<2>(port, addr, value); break;
        case 4: store_fixed<4>(port, addr, value); break;
        default: store_fixed<8>(port, addr, value); break;
    }
}

// A read port (storage, or the device memory's read side) with its window and, in C simulation, the
// harness's storage accounting (null for the device memory and under synthesis).
struct ReadPort {
    const uint8_t* data;
    uint64_t size;
    StorageTally* tally;
};

// One storage read of `bytes` at `addr` into the harness's accounting (StorageTally).
inline void tally_read(StorageTally* tally, uint64_t addr, unsigned bytes) {
    tally->reads += 1;
    tally->bytes += bytes;
    if (!tally->page_bits) return;
count_pages:
    for (uint64_t page = addr / SMARTSAGE_IMAGE_PAGE_SIZE; page <= (addr + bytes - 1) / SMARTSAGE_IMAGE_PAGE_SIZE;
         ++page) {
        if (page >= tally->page_count) break;
        uint64_t& word = tally->page_bits[page / 64];
        const uint64_t bit = uint64_t(1) << (page % 64);
        if (!(word & bit)) {
            word |= bit;
            tally->pages += 1;
        }
    }
}

// Reads `bytes` at base + offset into *value; a bus error sets *error (STORAGE_ERROR, the address).
inline bool bus_read(ReadPort port, uint64_t base, uint64_t offset, unsigned bytes, uint64_t* value,
                     Fault* error, uint64_t* bytes_read) {
    if (!in_window(base, offset, bytes, port.size)) {
        *error = fault(SMARTSAGE_STATUS_STORAGE_ERROR, 0, 0, fault_address(base, offset, port.size));
        return false;
    }
    *value = load_le(port.data, base + offset, bytes);
    *bytes_read += bytes;
#ifndef __SYNTHESIS__
    if (port.tally) tally_read(port.tally, base + offset, bytes);
#endif
    return true;
}

struct WritePort {
    uint8_t* data;
    uint64_t size;
};

inline bool bus_write(WritePort port, uint64_t base, uint64_t offset, unsigned bytes, uint64_t value,
                      Fault* error) {
    if (!in_window(base, offset, bytes, port.size)) {
        *error = fault(SMARTSAGE_STATUS_OUTPUT_ERROR, 0, 0, fault_address(base, offset, port.size));
        return false;
    }
    store_le(port.data, base + offset, value, bytes);
    return true;
}

// ---------------------------------------------------------------------- counter-based RNG (spec 1)

typedef ap_uint<32> word_t;

inline word_t mix32(word_t word) {
    uint32_t x = uint32_t(word);
    x ^= x >> 16;
    x *= SMARTSAGE_RNG_MIX_MUL1;
    x ^= x >> 15;
    x *= SMARTSAGE_RNG_MIX_MUL2;
    x ^= x >> 16;
    return x;
}

inline word_t command_key(uint64_t seed) {
    return mix32(mix32(uint32_t(seed) ^ SMARTSAGE_RNG_SEED_SALT) ^ uint32_t(seed >> 32));
}

inline word_t hop_key(word_t key, uint32_t hop) { return mix32(key ^ hop ^ SMARTSAGE_RNG_HOP_SALT); }

inline word_t node_key(word_t hkey, uint64_t node) {
    return mix32(mix32(hkey ^ uint32_t(node)) ^ uint32_t(node >> 32) ^ SMARTSAGE_RNG_NODE_SALT);
}

inline word_t draw(word_t nkey, word_t index) { return mix32(mix32(nkey ^ index) ^ SMARTSAGE_RNG_DRAW_SALT); }

// Uniform in [0, n), 1 <= n < 2^32: Lemire's multiply-shift with exact rejection. The remainder
// (2^32 - n) mod n is computed only on the rare path low < n.
inline uint32_t bounded(word_t nkey, uint32_t n, word_t* draw_index) {
bounded_draws:
    for (;;) {
        SMARTSAGE_HLS(PIPELINE II=1)
        ap_uint<64> product = uint64_t(uint32_t(draw(nkey, *draw_index))) * n;
        *draw_index += 1;
        uint32_t low = uint32_t(product.range(31, 0));
        if (low < n && low < uint32_t(0u - n) % n) continue;
        return uint32_t(product.range(63, 32));
    }
}

// Robert Floyd's algorithm (spec section 2), degree > fanout: `fanout` distinct edge positions in
// [0, degree), in insertion order, into positions[0 .. fanout-1]. Returns the draws consumed.
uint32_t floyd_positions(word_t nkey, uint32_t degree, uint32_t fanout, uint32_t* positions) {
    word_t draw_index = 0;
floyd:
    for (uint32_t j = degree - fanout, n = 0; j < degree; ++j, ++n) {
        SMARTSAGE_HLS(LOOP_TRIPCOUNT min=1 max=1024)
        const uint32_t t = bounded(nkey, j + 1, &draw_index);
        bool taken = false;
    floyd_membership:
        for (uint32_t q = 0; q < n; ++q) {
            SMARTSAGE_HLS(PIPELINE II=1)
            taken = taken || positions[q] == t;
        }
        positions[n] = taken ? j : t;
    }
    return uint32_t(draw_index);
}

// ------------------------------------------------------------------------------- image and command

struct ImageInfo {
    uint64_t num_nodes;
    uint32_t feature_dim;
    uint32_t feature_bytes;   // itemsize of the feature dtype
    uint32_t feature_dtype;   // SMARTSAGE_FEATURE_DTYPE_*
    uint32_t id_bytes;        // 4 (u32 indices) or 8 (u64)
    uint64_t indptr_addr;     // absolute storage addresses of the sections
    uint64_t features_addr;
    uint64_t indices_addr;
};

struct Command {
    uint32_t magic;
    uint32_t version;
    uint32_t flags;
    uint64_t seed;
    uint32_t num_targets;
    uint32_t num_hops;
    uint32_t fanout[SMARTSAGE_SPEC_MAX_HOPS];
    uint64_t nodes_ptr, nodes_capacity;
    uint64_t counts_ptr, counts_capacity;
    uint64_t self_ptr, self_capacity;
    uint64_t sum_ptr, sum_capacity;
    uint64_t result_ptr;
};

// --------------------------------------------------------------------------------- dataflow tokens

enum TokenKind : uint8_t {
    TOKEN_NODE = 0,      // a frontier node; after sampling: value = node, count = its sample count
    TOKEN_NEIGHBOR = 1,  // value = a sampled neighbor id, in sample order
    TOKEN_END = 2,       // end of the hop: fault = the first error upstream, value = storage bytes read
};

struct Token {
    uint8_t kind;
    uint32_t count;
    uint64_t value;
    Fault fault;              // TOKEN_END only
    SampleCounters counters;  // TOKEN_END only: the sampler's draw counters (observation)
};

inline Token make_token(uint8_t kind, uint32_t count, uint64_t value) {
    return Token{kind, count, value, kNoFault, {0, 0}};
}

inline Token end_token(Fault error, uint64_t storage_bytes, SampleCounters counters) {
    return Token{TOKEN_END, 0, storage_bytes, error, counters};
}

// What one hop leaves behind for the controller.
struct HopOutcome {
    Fault error;
    uint64_t nodes_written;
    uint64_t storage_bytes;
    SampleCounters counters;
};

// Stage "read": the frontier F_h = nodes[0 : frontier_size], from the node list in device memory.
void read_frontier(ReadPort memory, uint64_t nodes_ptr, uint32_t id_bytes, uint64_t frontier_size,
                   hls::stream<Token>& frontier) {
    Fault error = kNoFault;
    uint64_t unused_counter = 0;
read_frontier_entries:
    for (uint64_t i = 0; i < frontier_size; ++i) {
        SMARTSAGE_HLS(PIPELINE II=1)
        uint64_t node = 0;
        if (!bus_read(memory, nodes_ptr, scaled(i, id_bytes), id_bytes, &node, &error, &unused_counter)) break;
        frontier.write(make_token(TOKEN_NODE, 0, node));
    }
    frontier.write(end_token(error, 0, SampleCounters{0, 0}));
}

// A frontier entry with its adjacency range, from the degree stage to the sampler.
enum EntryState : uint8_t {
    ENTRY_IN_RANGE = 0,      // node < num_nodes; begin/degree read from indptr
    ENTRY_OUT_OF_RANGE = 1,  // node >= num_nodes: indptr not read
    ENTRY_FAULT = 2,         // the indptr read failed: fault says where (the stage then drains)
    ENTRY_END = 3,           // end of the frontier: fault = the first error upstream
};

struct FrontierEntry {
    uint8_t state;
    uint64_t node;
    uint64_t begin;   // indptr[node]
    uint32_t degree;  // indptr[node + 1] - indptr[node]
    uint64_t storage_bytes;  // ENTRY_END: indptr bytes read by the stage
    Fault fault;
};

// Stage "degree": indptr[v] and indptr[v+1] of every in-range frontier entry, issued ahead of the
// sampler (in hardware: the read engine keeps many of these reads outstanding).
void fetch_degrees(ReadPort storage, ReadPort indices, const ImageInfo& image, hls::stream<Token>& frontier,
                   hls::stream<FrontierEntry>& entries) {
    Fault error = kNoFault;
    uint64_t storage_bytes = 0;
fetch_entries:
    for (;;) {
        SMARTSAGE_HLS(PIPELINE II=1)
        Token token = frontier.read();
        if (token.kind == TOKEN_END) {
            if (error.status == SMARTSAGE_STATUS_OK) error = token.fault;
            break;
        }
        if (error.status != SMARTSAGE_STATUS_OK) continue;  // drain after the first error
        FrontierEntry entry = {ENTRY_IN_RANGE, token.value, 0, 0, 0, kNoFault};
        if (entry.node >= image.num_nodes) {
            entry.state = ENTRY_OUT_OF_RANGE;
            entries.write(entry);
            continue;
        }
        uint64_t begin = 0, end = 0;
        if (!bus_read(storage, image.indptr_addr, scaled(entry.node, 8), 8, &begin, &error, &storage_bytes) ||
            !bus_read(storage, image.indptr_addr, scaled(entry.node + 1, 8), 8, &end, &error, &storage_bytes)) {
            entry.state = ENTRY_FAULT;
            entry.fault = error;
            entries.write(entry);
            continue;
        }
        // A degree that is negative or >= 2^32 cannot come from a valid image (spec: d < 2^32); the
        // kernel reports the indptr entry it cannot use as a storage error instead of sampling it.
        if (end < begin || end - begin > 0xFFFFFFFFull) {
            error = fault(SMARTSAGE_STATUS_STORAGE_ERROR, 0, 0,
                          address_of(image.indptr_addr, scaled(entry.node + 1, 8)));
            entry.state = ENTRY_FAULT;
            entry.fault = error;
            entries.write(entry);
            continue;
        }
        entry.begin = begin;
        entry.degree = uint32_t(end - begin);
        // C simulation: start fetching the adjacency list now, as the hardware read engine issues
        // its burst ahead of the sampler (nothing under synthesis).
        if (entry.degree && in_window(image.indices_addr, scaled(begin, image.id_bytes), 1, indices.size))
            SMARTSAGE_PREFETCH(indices.data + image.indices_addr + begin * image.id_bytes);
        entries.write(entry);
    }
    FrontierEntry last = {ENTRY_END, 0, 0, 0, storage_bytes, error};
    entries.write(last);
}

// Stage "sample": for each frontier entry, the checks of step 4, then min(d, k) distinct edge
// positions (all of them, or Floyd's algorithm in insertion order) and the neighbors at them.
void sample_frontier(ReadPort storage, const ImageInfo& image, uint32_t hop, word_t hkey, uint32_t fanout,
                     uint64_t nodes_capacity, uint64_t nodes_before, hls::stream<FrontierEntry>& entries,
                     hls::stream<Token>& samples) {
    uint64_t draws = 0, rejections = 0;
    Fault error = kNoFault;
    uint64_t storage_bytes = 0;
    uint64_t written = nodes_before;  // w: node-list entries after the previous entries' samples
    uint32_t positions[SMARTSAGE_MAX_FANOUT];
    uint64_t neighbors[SMARTSAGE_MAX_FANOUT];
    SMARTSAGE_HLS(ARRAY_PARTITION variable=positions cyclic factor=8)
    uint64_t index = 0;
sample_entries:
    for (;;) {
        FrontierEntry entry = entries.read();
        if (entry.state == ENTRY_END) {
            storage_bytes += entry.storage_bytes;
            if (error.status == SMARTSAGE_STATUS_OK) error = entry.fault;
            break;
        }
        const uint64_t i = index++;
        if (error.status != SMARTSAGE_STATUS_OK) continue;  // drain after the first error
        const uint64_t node = entry.node;
        if (entry.state == ENTRY_OUT_OF_RANGE) {
            error = fault(SMARTSAGE_STATUS_NODE_OUT_OF_RANGE, hop, i, node);
            continue;
        }
        if (entry.state == ENTRY_FAULT) {
            error = entry.fault;
            continue;
        }
        const uint64_t begin = entry.begin;
        const uint32_t degree = entry.degree;
        const uint32_t count = degree < fanout ? degree : fanout;
        if (count > nodes_capacity || written > nodes_capacity - count) {
            // written + count > capacity; the needed value saturates rather than wraps.
            const uint64_t needed = written > kAllOnes - count ? kAllOnes : written + count;
            error = fault(SMARTSAGE_STATUS_NODES_CAPACITY, hop, i, needed);
            continue;
        }
        if (degree <= fanout) {
        all_positions:
            for (uint32_t p = 0; p < count; ++p) {
                SMARTSAGE_HLS(PIPELINE II=1)
                positions[p] = p;
            }
        } else {
            const uint32_t used = floyd_positions(node_key(hkey, node), degree, fanout, positions);
            draws += used;
            rejections += used - fanout;
        }
        bool read_ok = true;
    read_neighbors:
        for (uint32_t p = 0; p < count; ++p) {
            SMARTSAGE_HLS(PIPELINE II=1)
            const uint64_t edge = begin + positions[p];
            if (!bus_read(storage, image.indices_addr, scaled(edge, image.id_bytes), image.id_bytes,
                          &neighbors[p], &error, &storage_bytes)) {
                read_ok = false;
                break;
            }
        }
        if (!read_ok) continue;
        samples.write(make_token(TOKEN_NODE, count, node));
    emit_neighbors:
        for (uint32_t p = 0; p < count; ++p) {
            SMARTSAGE_HLS(PIPELINE II=1)
            samples.write(make_token(TOKEN_NEIGHBOR, 0, neighbors[p]));
        }
        written += count;
    }
    samples.write(end_token(error, storage_bytes, SampleCounters{draws, rejections}));
}

// Exact widening of one stored feature element to binary32 bits (fp16 and bf16 are subsets).
inline uint32_t widen_to_binary32(uint32_t dtype, uint64_t stored) {
    if (dtype == SMARTSAGE_FEATURE_DTYPE_BF16) return uint32_t(stored) << 16;
    if (dtype != SMARTSAGE_FEATURE_DTYPE_FP16) return uint32_t(stored);
    const uint32_t half = uint32_t(stored);
    const uint32_t sign = (half & 0x8000u) << 16;
    const uint32_t exponent = (half >> 10) & 0x1Fu;
    uint32_t mantissa = half & 0x3FFu;
    if (exponent == 0x1F) return sign | 0x7F800000u | (mantissa << 13);  // inf, NaN
    if (exponent != 0) return sign | ((exponent + 112) << 23) | (mantissa << 13);
    if (mantissa == 0) return sign;  // signed zero
    // Subnormal half: normalise (at most 10 shifts); value = mantissa * 2^-24.
    uint32_t biased = 113;
normalise_subnormal:
    for (int s = 0; s < 10 && !(mantissa & 0x400u); ++s) {
        SMARTSAGE_HLS(UNROLL)
        mantissa <<= 1;
        --biased;
    }
    return sign | (biased << 23) | ((mantissa & 0x3FFu) << 13);
}

inline float bits_to_float(uint32_t bits) {
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

inline uint32_t float_to_bits(float value) {
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    return bits;
}

// C simulation: start fetching a feature row (up to one tile) before the sums need it, as the
// hardware issues the row reads of all of a node's neighbors back to back (nothing under synthesis).
inline void prefetch_row(ReadPort storage, uint64_t base, uint64_t offset, uint64_t row_bytes) {
    const uint64_t span = row_bytes < 4 * SMARTSAGE_FEATURE_TILE ? row_bytes : 4 * SMARTSAGE_FEATURE_TILE;
    if (!in_window(base, offset, span, storage.size)) return;
prefetch_lines:
    for (uint64_t line = 0; line < span; line += 64) SMARTSAGE_PREFETCH(storage.data + base + offset + line);
}

// Stage "aggregate": for each last-frontier entry i, its own feature row (bytes as stored) to
// self[i] and the elementwise sum of its sampled neighbors' rows (binary32 RNE in sample order,
// canonical NaN; int8 exactly in i32) to sum[i], written through the stage's own master. Columns are
// processed in tiles of SMARTSAGE_FEATURE_TILE so the accumulator is a fixed on-chip array whatever
// the feature dimension. Node and neighbor tokens pass through to the write stage.
void aggregate_frontier(ReadPort storage, WritePort memory, const Command& command, const ImageInfo& image,
                        bool active, Fault capacity_error, hls::stream<Token>& samples,
                        hls::stream<Token>& results) {
    Fault error = kNoFault;
    uint64_t storage_bytes = 0;
    SampleCounters counters = {0, 0};
    uint64_t neighbors[SMARTSAGE_MAX_FANOUT];
    float sum_fp[SMARTSAGE_FEATURE_TILE];
    int32_t sum_int[SMARTSAGE_FEATURE_TILE];
    const bool gather = active && capacity_error.status == SMARTSAGE_STATUS_OK;
    const uint64_t row_bytes = uint64_t(image.feature_dim) * image.feature_bytes;
    const bool integer = image.feature_dtype == SMARTSAGE_FEATURE_DTYPE_INT8;
    const uint64_t sum_row_bytes = uint64_t(image.feature_dim) * 4;
    uint64_t entry = 0;  // i: position in the last frontier
aggregate_entries:
    for (;;) {
        Token token = samples.read();
        if (token.kind == TOKEN_END) {
            storage_bytes += token.value;
            counters = token.counters;
            if (error.status == SMARTSAGE_STATUS_OK) error = token.fault;
            if (error.status == SMARTSAGE_STATUS_OK && active) error = capacity_error;
            break;
        }
        if (error.status != SMARTSAGE_STATUS_OK) continue;  // drain after the first error
        results.write(token);
        if (!gather || token.kind != TOKEN_NODE) continue;
        const uint32_t count = token.count;
    collect_neighbors:
        for (uint32_t q = 0; q < count; ++q) {
            SMARTSAGE_HLS(PIPELINE II=1)
            Token neighbor = samples.read();  // the sample stage emits a node's neighbors whole
            results.write(neighbor);
            neighbors[q] = neighbor.value;
            prefetch_row(storage, image.features_addr, scaled(neighbor.value, row_bytes), row_bytes);
        }
        const uint64_t i = entry++;
        const uint64_t self_row = scaled(token.value, row_bytes);
        const uint64_t self_out = scaled(i, row_bytes);
        const uint64_t sum_out = scaled(i, sum_row_bytes);
    self_row_elements:
        for (uint32_t e = 0; e < image.feature_dim; ++e) {
            SMARTSAGE_HLS(PIPELINE II=1)
            const uint64_t column = uint64_t(e) * image.feature_bytes;
            uint64_t stored = 0;
            if (!bus_read(storage, image.features_addr, address_of(self_row, column), image.feature_bytes,
                          &stored, &error, &storage_bytes) ||
                !bus_write(memory, command.self_ptr, address_of(self_out, column), image.feature_bytes, stored,
                           &error))
                break;
        }
        if (error.status != SMARTSAGE_STATUS_OK) continue;
    sum_tiles:
        for (uint32_t first = 0; first < image.feature_dim; first += SMARTSAGE_FEATURE_TILE) {
            const uint32_t left = image.feature_dim - first;
            const uint32_t width = left < SMARTSAGE_FEATURE_TILE ? left : SMARTSAGE_FEATURE_TILE;
        clear_tile:
            for (uint32_t e = 0; e < width; ++e) {
                SMARTSAGE_HLS(PIPELINE II=1)
                sum_fp[e] = 0.0f;  // n = 0 gives +0.0
                sum_int[e] = 0;
            }
        sum_neighbors:
            for (uint32_t q = 0; q < count && error.status == SMARTSAGE_STATUS_OK; ++q) {
                const uint64_t row = scaled(neighbors[q], row_bytes);
            sum_elements:
                for (uint32_t e = 0; e < width; ++e) {
                    SMARTSAGE_HLS(PIPELINE II=1)
                    uint64_t stored = 0;
                    if (!bus_read(storage, image.features_addr,
                                  address_of(row, uint64_t(first + e) * image.feature_bytes),
                                  image.feature_bytes, &stored, &error, &storage_bytes)) break;
                    if (integer) {
                        sum_int[e] += int32_t(int8_t(uint8_t(stored)));
                    } else {
                        const float x = bits_to_float(widen_to_binary32(image.feature_dtype, stored));
                        sum_fp[e] = q == 0 ? x : sum_fp[e] + x;  // binary32, round to nearest even
                    }
                }
            }
            if (error.status != SMARTSAGE_STATUS_OK) break;
        emit_tile:
            for (uint32_t e = 0; e < width; ++e) {
                SMARTSAGE_HLS(PIPELINE II=1)
                uint32_t bits = integer ? uint32_t(sum_int[e]) : float_to_bits(sum_fp[e]);
                if (!integer && sum_fp[e] != sum_fp[e]) bits = SMARTSAGE_CANONICAL_NAN;
                if (!bus_write(memory, command.sum_ptr, address_of(sum_out, uint64_t(first + e) * 4), 4, bits,
                               &error))
                    break;
            }
            if (error.status != SMARTSAGE_STATUS_OK) break;
        }
    }
    results.write(end_token(error, storage_bytes, counters));
}

// Stage "write": counts and node-list appends into device memory.
void write_results(WritePort memory, const Command& command, uint32_t id_bytes, uint64_t counts_before,
                   uint64_t nodes_before, hls::stream<Token>& results, HopOutcome* outcome) {
    Fault error = kNoFault;
    uint64_t entry = 0;
    uint64_t written = nodes_before;
    uint64_t storage_bytes = 0;
    SampleCounters counters = {0, 0};
write_tokens:
    for (;;) {
        SMARTSAGE_HLS(PIPELINE II=1)
        Token token = results.read();
        if (token.kind == TOKEN_END) {
            storage_bytes = token.value;
            counters = token.counters;
            if (error.status == SMARTSAGE_STATUS_OK) error = token.fault;
            break;
        }
        if (error.status != SMARTSAGE_STATUS_OK) continue;  // drain after the first error
        switch (token.kind) {
            case TOKEN_NODE:
                bus_write(memory, command.counts_ptr, scaled(counts_before + entry, 4), 4, token.count, &error);
                ++entry;
                break;
            default:  // TOKEN_NEIGHBOR
                bus_write(memory, command.nodes_ptr, scaled(written, id_bytes), id_bytes, token.value, &error);
                ++written;
                break;
        }
    }
    outcome->error = error;
    outcome->nodes_written = written;
    outcome->storage_bytes = storage_bytes;
    outcome->counters = counters;
}

// One hop: the five stages as a dataflow region.
void hop_dataflow(ReadPort storage, ReadPort indices, ReadPort features, ReadPort memory_in,
                  WritePort memory_out, WritePort memory_features, const ImageInfo& image,
                  const Command& command, uint32_t hop, word_t hkey, uint64_t frontier_size,
                  uint64_t counts_before, bool aggregate, Fault capacity_error, HopOutcome* outcome) {
    SMARTSAGE_HLS(DATAFLOW)
    hls::stream<Token> frontier("frontier");
    hls::stream<FrontierEntry> entries("entries");
    hls::stream<Token> samples("samples");
    hls::stream<Token> results("results");
    SMARTSAGE_HLS(STREAM variable=frontier depth=64)
    SMARTSAGE_HLS(STREAM variable=entries depth=64)
    SMARTSAGE_HLS(STREAM variable=samples depth=1024)
    SMARTSAGE_HLS(STREAM variable=results depth=1024)
    read_frontier(memory_in, command.nodes_ptr, image.id_bytes, frontier_size, frontier);
    fetch_degrees(storage, indices, image, frontier, entries);
    sample_frontier(indices, image, hop, hkey, command.fanout[hop], command.nodes_capacity, frontier_size,
                    entries, samples);
    aggregate_frontier(features, memory_features, command, image, aggregate, capacity_error, samples,
                       results);
    write_results(memory_out, command, image.id_bytes, counts_before, frontier_size, results, outcome);
}

// ------------------------------------------------------------------------------------ the command

// Reads the header page of the image (spec step 1). Returns false with *error set on a bad image.
bool read_image_header(ReadPort storage, uint64_t image_addr, ImageInfo* image, Fault* error,
                       uint64_t* storage_bytes) {
    uint64_t magic = 0, version = 0, num_nodes = 0, feature_dim = 0, feature_dtype = 0, index_dtype = 0;
    if (!bus_read(storage, image_addr, SMARTSAGE_IMAGE_MAGIC_OFFSET, 8, &magic, error, storage_bytes) ||
        !bus_read(storage, image_addr, SMARTSAGE_IMAGE_VERSION_OFFSET, 4, &version, error, storage_bytes))
        return false;
    if (magic != SMARTSAGE_IMAGE_MAGIC || version != SMARTSAGE_IMAGE_VERSION) {
        *error = fault(SMARTSAGE_STATUS_BAD_IMAGE, 0, 0, 0);
        return false;
    }
    if (!bus_read(storage, image_addr, SMARTSAGE_IMAGE_NUM_NODES_OFFSET, 8, &num_nodes, error, storage_bytes) ||
        !bus_read(storage, image_addr, SMARTSAGE_IMAGE_FEATURE_DIM_OFFSET, 4, &feature_dim, error,
                  storage_bytes) ||
        !bus_read(storage, image_addr, SMARTSAGE_IMAGE_FEATURE_DTYPE_OFFSET, 1, &feature_dtype, error,
                  storage_bytes) ||
        !bus_read(storage, image_addr, SMARTSAGE_IMAGE_INDEX_DTYPE_OFFSET, 1, &index_dtype, error, storage_bytes))
        return false;
    uint32_t feature_bytes = 0;
    switch (feature_dtype) {
        case SMARTSAGE_FEATURE_DTYPE_FP32: feature_bytes = 4; break;
        case SMARTSAGE_FEATURE_DTYPE_FP16: feature_bytes = 2; break;
        case SMARTSAGE_FEATURE_DTYPE_BF16: feature_bytes = 2; break;
        case SMARTSAGE_FEATURE_DTYPE_INT8: feature_bytes = 1; break;
        default: break;
    }
    const uint32_t id_bytes = index_dtype == SMARTSAGE_INDEX_DTYPE_U32 ? 4
                              : index_dtype == SMARTSAGE_INDEX_DTYPE_U64 ? 8 : 0;
    if (feature_bytes == 0 || id_bytes == 0) {  // a dtype code no version-1 image has
        *error = fault(SMARTSAGE_STATUS_BAD_IMAGE, 0, 0, 0);
        return false;
    }
    uint64_t section_offset[3] = {0, 0, 0};
    const uint32_t entries[3] = {SMARTSAGE_SECTION_INDPTR_ENTRY, SMARTSAGE_SECTION_FEATURES_ENTRY,
                                 SMARTSAGE_SECTION_INDICES_ENTRY};
read_section_table:
    for (int s = 0; s < 3; ++s) {
        const uint64_t at = SMARTSAGE_IMAGE_SECTION_TABLE_OFFSET + entries[s] * SMARTSAGE_SECTION_ENTRY_SIZE +
                            SMARTSAGE_SECTION_OFFSET_OFFSET;
        if (!bus_read(storage, image_addr, at, 8, &section_offset[s], error, storage_bytes)) return false;
    }
    image->num_nodes = num_nodes;
    image->feature_dim = uint32_t(feature_dim);
    image->feature_bytes = feature_bytes;
    image->feature_dtype = uint32_t(feature_dtype);
    image->id_bytes = id_bytes;
    image->indptr_addr = image_addr + section_offset[0];
    image->features_addr = image_addr + section_offset[1];
    image->indices_addr = image_addr + section_offset[2];
    return true;
}

bool read_descriptor(ReadPort memory, uint64_t addr, Command* command, Fault* error) {
    uint64_t ignored = 0;
    uint64_t raw[SMARTSAGE_DESCRIPTOR_SIZE / 8];
read_descriptor_words:
    for (unsigned w = 0; w < SMARTSAGE_DESCRIPTOR_SIZE / 8; ++w) {
        SMARTSAGE_HLS(PIPELINE II=1)
        if (!bus_read(memory, addr, 8 * w, 8, &raw[w], error, &ignored)) return false;
    }
    // Fields by their generated offsets (all are naturally aligned inside the 64-bit words).
    auto field = [&raw](unsigned offset, unsigned bytes) -> uint64_t {
        const uint64_t word = raw[offset / 8] >> (8 * (offset % 8));
        return bytes == 8 ? word : word & ((uint64_t(1) << (8 * bytes)) - 1);
    };
    command->magic = uint32_t(field(SMARTSAGE_DESC_MAGIC_OFFSET, 4));
    command->version = uint32_t(field(SMARTSAGE_DESC_VERSION_OFFSET, 2));
    command->flags = uint32_t(field(SMARTSAGE_DESC_FLAGS_OFFSET, 2));
    command->seed = field(SMARTSAGE_DESC_SEED_OFFSET, 8);
    command->num_targets = uint32_t(field(SMARTSAGE_DESC_NUM_TARGETS_OFFSET, 4));
    command->num_hops = uint32_t(field(SMARTSAGE_DESC_NUM_HOPS_OFFSET, 4));
    command->fanout[0] = uint32_t(field(SMARTSAGE_DESC_FANOUT0_OFFSET, 2));
    command->fanout[1] = uint32_t(field(SMARTSAGE_DESC_FANOUT1_OFFSET, 2));
    command->fanout[2] = uint32_t(field(SMARTSAGE_DESC_FANOUT2_OFFSET, 2));
    command->fanout[3] = uint32_t(field(SMARTSAGE_DESC_FANOUT3_OFFSET, 2));
    command->nodes_ptr = field(SMARTSAGE_DESC_NODES_PTR_OFFSET, 8);
    command->nodes_capacity = field(SMARTSAGE_DESC_NODES_CAPACITY_OFFSET, 8);
    command->counts_ptr = field(SMARTSAGE_DESC_COUNTS_PTR_OFFSET, 8);
    command->counts_capacity = field(SMARTSAGE_DESC_COUNTS_CAPACITY_OFFSET, 8);
    command->self_ptr = field(SMARTSAGE_DESC_SELF_PTR_OFFSET, 8);
    command->self_capacity = field(SMARTSAGE_DESC_SELF_CAPACITY_OFFSET, 8);
    command->sum_ptr = field(SMARTSAGE_DESC_SUM_PTR_OFFSET, 8);
    command->sum_capacity = field(SMARTSAGE_DESC_SUM_CAPACITY_OFFSET, 8);
    command->result_ptr = field(SMARTSAGE_DESC_RESULT_PTR_OFFSET, 8);
    return true;
}

// Step 2: the descriptor, field by field in layout order; error_value = the first bad field's offset.
Fault check_descriptor(const Command& c, const ImageInfo& image, BuildLimits limits) {
    auto bad = [](uint64_t offset) { return fault(SMARTSAGE_STATUS_BAD_DESCRIPTOR, 0, 0, offset); };
    const bool aggregate = (c.flags & SMARTSAGE_FLAG_AGGREGATE) != 0;
    if (c.magic != SMARTSAGE_DESCRIPTOR_MAGIC) return bad(SMARTSAGE_DESC_MAGIC_OFFSET);
    if (c.version != SMARTSAGE_DESCRIPTOR_VERSION) return bad(SMARTSAGE_DESC_VERSION_OFFSET);
    if ((c.flags & ~uint32_t(SMARTSAGE_FLAG_AGGREGATE)) != 0 || (aggregate && image.feature_dim == 0))
        return bad(SMARTSAGE_DESC_FLAGS_OFFSET);
    if (c.num_targets < 1) return bad(SMARTSAGE_DESC_NUM_TARGETS_OFFSET);
    if (c.num_hops < 1 || c.num_hops > limits.max_hops) return bad(SMARTSAGE_DESC_NUM_HOPS_OFFSET);
    const unsigned fanout_offsets[SMARTSAGE_SPEC_MAX_HOPS] = {
        SMARTSAGE_DESC_FANOUT0_OFFSET, SMARTSAGE_DESC_FANOUT1_OFFSET, SMARTSAGE_DESC_FANOUT2_OFFSET,
        SMARTSAGE_DESC_FANOUT3_OFFSET};
check_fanouts:
    for (unsigned h = 0; h < SMARTSAGE_SPEC_MAX_HOPS; ++h) {
        const bool used = h < c.num_hops;
        if (used ? (c.fanout[h] < 1 || c.fanout[h] > limits.max_fanout) : c.fanout[h] != 0)
            return bad(fanout_offsets[h]);
    }
    if (c.nodes_ptr % SMARTSAGE_BUFFER_ALIGN) return bad(SMARTSAGE_DESC_NODES_PTR_OFFSET);
    if (c.nodes_capacity < c.num_targets) return bad(SMARTSAGE_DESC_NODES_CAPACITY_OFFSET);
    if (c.counts_ptr % SMARTSAGE_BUFFER_ALIGN) return bad(SMARTSAGE_DESC_COUNTS_PTR_OFFSET);
    if (aggregate && c.self_ptr % SMARTSAGE_BUFFER_ALIGN) return bad(SMARTSAGE_DESC_SELF_PTR_OFFSET);
    if (aggregate && c.sum_ptr % SMARTSAGE_BUFFER_ALIGN) return bad(SMARTSAGE_DESC_SUM_PTR_OFFSET);
    if (c.result_ptr % SMARTSAGE_BUFFER_ALIGN) return bad(SMARTSAGE_DESC_RESULT_PTR_OFFSET);
    return kNoFault;
}

// Step 5, evaluated before the last hop (|F_{L-1}| is known then) and reported after it.
Fault check_feature_capacity(const Command& c, const ImageInfo& image, uint64_t frontier_size) {
    const uint64_t self_needed = scaled(scaled(frontier_size, image.feature_dim), image.feature_bytes);
    if (self_needed > c.self_capacity) return fault(SMARTSAGE_STATUS_FEATURES_CAPACITY, 0, 0, self_needed);
    const uint64_t sum_needed = scaled(scaled(frontier_size, image.feature_dim), 4);
    if (sum_needed > c.sum_capacity) return fault(SMARTSAGE_STATUS_FEATURES_CAPACITY, 0, 1, sum_needed);
    return kNoFault;
}

void write_result_header(WritePort memory, uint64_t addr, const ResultRecord& r, Fault* error) {
    const uint64_t words[SMARTSAGE_RESULT_HEADER_SIZE / 8] = {
        uint64_t(r.status) | (uint64_t(r.error_hop) << 32), r.error_index, r.error_value, r.nodes_written,
        r.counts_written, r.edges_sampled, r.storage_bytes, r.cycles};
    static_assert(SMARTSAGE_RESULT_STATUS_OFFSET == 0 && SMARTSAGE_RESULT_ERROR_HOP_OFFSET == 4 &&
                      SMARTSAGE_RESULT_ERROR_INDEX_OFFSET == 8 && SMARTSAGE_RESULT_CYCLES_OFFSET == 56,
                  "result header layout changed: update write_result_header");
write_result_words:
    for (unsigned w = 0; w < SMARTSAGE_RESULT_HEADER_SIZE / 8; ++w) {
        SMARTSAGE_HLS(PIPELINE II=1)
        if (!bus_write(memory, addr, 8 * w, 8, words[w], error)) return;
    }
}

void set_fault(ResultRecord* r, Fault f) {
    r->status = f.status;
    r->error_hop = f.hop;
    r->error_index = f.index;
    r->error_value = f.value;
}

bool run_core(ReadPort storage, ReadPort indices, ReadPort features, uint64_t image_addr, ReadPort memory_in,
              WritePort memory_out, WritePort memory_features,
              uint64_t descriptor_addr, BuildLimits limits, ResultRecord* result, SampleCounters* counters) {
    ResultRecord r = {};
    Command command = {};
    Fault error = kNoFault;
    SampleCounters totals = {0, 0};
    if (!read_descriptor(memory_in, descriptor_addr, &command, &error)) {
        set_fault(&r, error);  // no result_ptr known: nothing is written
        *result = r;
        *counters = totals;
        return false;
    }
    ImageInfo image = {};
    uint64_t storage_bytes = 0;
    uint64_t header_bytes = 0;  // the image header is not counted in storage_bytes, nor in the tally
    const ReadPort header_port = {storage.data, storage.size, nullptr};
    if (read_image_header(header_port, image_addr, &image, &error, &header_bytes))
        error = check_descriptor(command, image, limits);
    // The targets' burst: a window the read engine must be able to fetch before hop 0 starts.
    if (error.status == SMARTSAGE_STATUS_OK &&
        !in_window(command.nodes_ptr, 0, scaled(command.num_targets, image.id_bytes), memory_in.size))
        error = fault(SMARTSAGE_STATUS_STORAGE_ERROR, 0, 0, fault_address(command.nodes_ptr, 0, memory_in.size));
    uint64_t nodes = command.num_targets;  // |F_h| = entries of the node list in use
    uint64_t counts = 0;                   // c_h
    if (error.status == SMARTSAGE_STATUS_OK) {
        const word_t key = command_key(command.seed);
        const bool aggregate = (command.flags & SMARTSAGE_FLAG_AGGREGATE) != 0;
    hops:
        for (uint32_t hop = 0; hop < command.num_hops; ++hop) {
            SMARTSAGE_HLS(LOOP_TRIPCOUNT min=1 max=4)
            const uint64_t frontier_size = nodes;
            if (counts + frontier_size > command.counts_capacity) {
                error = fault(SMARTSAGE_STATUS_COUNTS_CAPACITY, hop, 0, counts + frontier_size);
                break;
            }
            const bool last = hop + 1 == command.num_hops;
            const Fault capacity = last && aggregate ? check_feature_capacity(command, image, frontier_size)
                                                     : kNoFault;
            HopOutcome outcome = {kNoFault, 0, 0, {0, 0}};
            hop_dataflow(storage, indices, features, memory_in, memory_out, memory_features, image, command, hop,
                         hop_key(key, hop), frontier_size, counts, last && aggregate, capacity, &outcome);
            storage_bytes += outcome.storage_bytes;
            totals.draws += outcome.counters.draws;
            totals.rejections += outcome.counters.rejections;
            nodes = outcome.nodes_written;
            if (outcome.error.status != SMARTSAGE_STATUS_OK) {
                error = outcome.error;
                break;
            }
            counts += frontier_size;
        }
    }
    set_fault(&r, error);
    if (error.status == SMARTSAGE_STATUS_OK) {  // on an error these stay 0, as the golden model has them
        r.nodes_written = nodes;
        r.counts_written = counts;
        r.edges_sampled = nodes - command.num_targets;
    }
    r.storage_bytes = storage_bytes;
    r.cycles = 0;  // C simulation has no clock
    *result = r;
    *counters = totals;
    // Misaligned result_ptr, or a header that would not fit the window: ap_done with nothing written.
    if (command.result_ptr % SMARTSAGE_BUFFER_ALIGN ||
        !in_window(command.result_ptr, 0, SMARTSAGE_RESULT_HEADER_SIZE, memory_out.size))
        return false;
    Fault write_error = kNoFault;
    write_result_header(memory_out, command.result_ptr, r, &write_error);
    return write_error.status == SMARTSAGE_STATUS_OK;
}

}  // namespace

bool run_command(const uint8_t* storage, uint64_t storage_size, uint64_t image_addr, uint8_t* memory,
                 uint64_t memory_size, uint64_t descriptor_addr, BuildLimits limits, ResultRecord* result,
                 SampleCounters* counters, StorageTally* tally) {
    const ReadPort storage_port = {storage, storage_size, tally};
    const WritePort memory_write = {memory, memory_size};
    return run_core(storage_port, storage_port, storage_port, image_addr, ReadPort{memory, memory_size, nullptr},
                    memory_write, memory_write, descriptor_addr, limits, result, counters);
}

}  // namespace smartsage

extern "C" void smartsage_kernel(const uint8_t* storage, const uint8_t* storage_indices,
                                 const uint8_t* storage_features, const uint8_t* memory_in, uint8_t* memory_out,
                                 uint8_t* memory_features, uint64_t image, uint64_t descriptor) {
    SMARTSAGE_HLS(INTERFACE m_axi port=storage bundle=storage offset=off max_widen_bitwidth=512 \
                  num_read_outstanding=64 max_read_burst_length=64 depth=4096)
    SMARTSAGE_HLS(INTERFACE m_axi port=storage_indices bundle=storage offset=off max_widen_bitwidth=512 \
                  num_read_outstanding=64 max_read_burst_length=64 depth=4096)
    SMARTSAGE_HLS(INTERFACE m_axi port=storage_features bundle=features offset=off max_widen_bitwidth=512 \
                  num_read_outstanding=64 max_read_burst_length=64 depth=4096)
    SMARTSAGE_HLS(INTERFACE m_axi port=memory_in bundle=memory offset=off max_widen_bitwidth=512 depth=4096)
    SMARTSAGE_HLS(INTERFACE m_axi port=memory_out bundle=memory offset=off max_widen_bitwidth=512 \
                  num_write_outstanding=32 max_write_burst_length=64 depth=4096)
    SMARTSAGE_HLS(INTERFACE m_axi port=memory_features bundle=memory offset=off max_widen_bitwidth=512 \
                  num_write_outstanding=32 max_write_burst_length=64 depth=4096)
    SMARTSAGE_HLS(INTERFACE s_axilite port=image offset=0x10 bundle=control)
    SMARTSAGE_HLS(INTERFACE s_axilite port=descriptor offset=0x18 bundle=control)
    SMARTSAGE_HLS(INTERFACE s_axilite port=return bundle=control)
    SMARTSAGE_HLS(INTERFACE ap_ctrl_hs port=return)
    smartsage::ResultRecord result;
    smartsage::SampleCounters counters;
    const smartsage::BuildLimits limits = {SMARTSAGE_MAX_FANOUT, SMARTSAGE_MAX_HOPS};
    // The interconnect decodes the address space: the kernel's own window is all of it.
    // Each dataflow process reads through its own argument (one reader per argument in a dataflow
    // region); the arguments alias the same storage.
    const uint64_t everything = ~uint64_t(0);
    smartsage::run_core(smartsage::ReadPort{storage, everything, nullptr},
                        smartsage::ReadPort{storage_indices, everything, nullptr},
                        smartsage::ReadPort{storage_features, everything, nullptr}, image,
                        smartsage::ReadPort{memory_in, everything, nullptr},
                        smartsage::WritePort{memory_out, everything},
                        smartsage::WritePort{memory_features, everything}, descriptor, limits, &result, &counters);
}

extern "C" uint32_t smartsage_abi_version(void) { return 2; }

// The RNG and the sampling rule on their own, for the test vectors of tests/vectors/rng.json.
extern "C" uint32_t smartsage_rng_mix32(uint32_t x) { return uint32_t(smartsage::mix32(x)); }
extern "C" uint32_t smartsage_rng_command_key(uint64_t seed) { return uint32_t(smartsage::command_key(seed)); }
extern "C" uint32_t smartsage_rng_hop_key(uint32_t key, uint32_t hop) {
    return uint32_t(smartsage::hop_key(key, hop));
}
extern "C" uint32_t smartsage_rng_node_key(uint32_t hop_key, uint64_t node) {
    return uint32_t(smartsage::node_key(hop_key, node));
}
extern "C" uint32_t smartsage_rng_draw(uint32_t node_key, uint32_t index) {
    return uint32_t(smartsage::draw(node_key, index));
}
extern "C" uint32_t smartsage_rng_bounded(uint32_t node_key, uint32_t n, uint32_t* index) {
    smartsage::word_t draw_index = *index;
    const uint32_t value = smartsage::bounded(node_key, n, &draw_index);
    *index = uint32_t(draw_index);
    return value;
}
// Positions of a node of `degree` sampled with `fanout` (all of them when degree <= fanout); returns the
// draws consumed, or UINT32_MAX when fanout is outside 1..SMARTSAGE_MAX_FANOUT.
extern "C" uint32_t smartsage_sample_positions(uint32_t node_key, uint32_t degree, uint32_t fanout,
                                               uint32_t* positions) {
    if (fanout < 1 || fanout > SMARTSAGE_MAX_FANOUT) return ~uint32_t(0);
    if (degree <= fanout) {
        for (uint32_t p = 0; p < degree; ++p) positions[p] = p;
        return 0;
    }
    return smartsage::floyd_positions(node_key, degree, fanout, positions);
}

extern "C" int smartsage_run(const uint8_t* storage, uint64_t storage_size, uint64_t image_addr, uint8_t* memory,
                             uint64_t memory_size, uint64_t descriptor_addr, uint32_t max_fanout,
                             uint32_t max_hops, uint8_t* result_out, uint64_t* counters_out, char* error,
                             uint64_t error_capacity) {
    try {
        if (max_fanout < 1 || max_fanout > SMARTSAGE_MAX_FANOUT || max_hops < 1 || max_hops > SMARTSAGE_MAX_HOPS) {
            if (error_capacity) {
                strncpy(error, "kernel limits outside this build's bounds", error_capacity - 1);
                error[error_capacity - 1] = 0;
            }
            return -1;
        }
        smartsage::ResultRecord result;
        smartsage::SampleCounters counters;
        // One bit per 4 KiB page of the storage: the distinct pages the command's reads touch.
        const uint64_t page_count = storage_size / SMARTSAGE_IMAGE_PAGE_SIZE + 1;
        std::vector<uint64_t> page_bits(page_count / 64 + 1, 0);
        smartsage::StorageTally tally = {0, 0, 0, page_bits.data(), page_count};
        const bool written = smartsage::run_command(storage, storage_size, image_addr, memory, memory_size,
                                                    descriptor_addr, smartsage::BuildLimits{max_fanout, max_hops},
                                                    &result, &counters, &tally);
        memcpy(result_out, &result, sizeof result);
        if (counters_out) {
            const uint64_t words[SMARTSAGE_RUN_COUNTERS] = {counters.draws, counters.rejections, tally.reads,
                                                            tally.bytes, tally.pages};
            memcpy(counters_out, words, sizeof words);
        }
        static_assert(sizeof(smartsage::ResultRecord) == SMARTSAGE_RESULT_HEADER_SIZE, "result record size");
        return written ? 1 : 0;
    } catch (const std::exception& exc) {
        if (error_capacity) {
            strncpy(error, exc.what(), error_capacity - 1);
            error[error_capacity - 1] = 0;
        }
        return -1;
    }
}
