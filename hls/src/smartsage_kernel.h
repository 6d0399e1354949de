// smartsage near-storage sampling kernel, Vitis-HLS-style C++ (docs/spec.md is the contract).
//
// Two entry points share one implementation (smartsage_kernel.cpp):
//   smartsage_kernel   the Vitis HLS top function: m_axi masters on the storage and the device memory,
//                      s_axilite control with ap_ctrl_hs, the two arguments of spec/descriptor.py
//                      REGISTERS (image at 0x10, descriptor at 0x18).
//   smartsage_run      the C-simulation entry: the same kernel over flat byte arrays of known size, so
//                      that an address outside them is a bus error (STORAGE_ERROR / OUTPUT_ERROR), as
//                      a DECERR from the interconnect would be, never an access outside the arrays.
#pragma once

#include <stdint.h>

#include "smartsage_hls.h"
#include "smartsage_spec_constants.h"
#include "smartsage_layout.h"

// Compile-time bounds of a kernel build (spec/config.py KernelConfig.max_fanout / max_hops). The C
// simulation build keeps the format's upper bounds and takes the build's limits as run-time values.
#ifndef SMARTSAGE_MAX_FANOUT
#define SMARTSAGE_MAX_FANOUT SMARTSAGE_SPEC_MAX_FANOUT
#endif
#ifndef SMARTSAGE_MAX_HOPS
#define SMARTSAGE_MAX_HOPS SMARTSAGE_SPEC_MAX_HOPS
#endif
// Feature columns summed per pass over a node's sampled neighbors (the accumulator's size).
#ifndef SMARTSAGE_FEATURE_TILE
#define SMARTSAGE_FEATURE_TILE 256
#endif

namespace smartsage {

// A result header as the kernel writes it (RESULT_FIELDS of spec/descriptor.py).
struct ResultRecord {
    uint32_t status;
    uint32_t error_hop;
    uint64_t error_index;
    uint64_t error_value;
    uint64_t nodes_written;
    uint64_t counts_written;
    uint64_t edges_sampled;
    uint64_t storage_bytes;
    uint64_t cycles;
};

// Observation counters of the sampler (not part of the result header).
struct SampleCounters {
    uint64_t draws;       // 32-bit random draws consumed
    uint64_t rejections;  // draws rejected by the bounded-integer test
};

// Storage accounting of the C-simulation harness (not part of the result header, not synthesized).
// One storage read is one access the kernel makes through a storage port: one bus_read of one
// element (1, 2, 4 or 8 bytes: an indptr entry, an index entry, one feature element), counted when it
// succeeds; the image header's reads are not counted, as in the result header's storage_bytes. (Vitis
// HLS may widen and burst consecutive accesses on the m_axi port; C simulation has no bus to do so.)
struct StorageTally {
    uint64_t reads;        // accesses
    uint64_t bytes;        // their bytes: equals the result header's storage_bytes
    uint64_t pages;        // distinct 4 KiB storage pages they touched (0 when page_bits is null)
    uint64_t* page_bits;   // harness-owned bitmap, one bit per storage page, or null: pages not counted
    uint64_t page_count;   // pages the bitmap covers
};

// Limits of the kernel build a command is checked against (run time in C simulation).
struct BuildLimits {
    uint32_t max_fanout;  // 1..SMARTSAGE_MAX_FANOUT
    uint32_t max_hops;    // 1..SMARTSAGE_MAX_HOPS
};

// Runs one command. `storage` holds `storage_size` bytes (the image lies at `image_addr`), `memory`
// holds `memory_size` bytes of device memory (address 0 is memory[0]). Fills `*result` and returns
// true when the result header was also written to memory at the descriptor's result_ptr.
// `tally`, when not null, accumulates the command's storage reads (StorageTally).
bool run_command(const uint8_t* storage, uint64_t storage_size, uint64_t image_addr, uint8_t* memory,
                 uint64_t memory_size, uint64_t descriptor_addr, BuildLimits limits, ResultRecord* result,
                 SampleCounters* counters, StorageTally* tally);

}  // namespace smartsage

// Vitis HLS top function. The pointers are absolute-address AXI4 masters (offset=off, no register),
// one per dataflow process that uses them (a dataflow argument has one reader and one writer):
// `storage` (image header, indptr), `storage_indices` (the sampler) and `storage_features` (the
// aggregator) all map the storage; `memory_in` (descriptor, frontiers), `memory_out` (node list,
// counts, result header) and `memory_features` (self and sum rows) all map the device memory.
// `image` and `descriptor` are the two 64-bit control registers (0x10 and 0x18).
extern "C" void smartsage_kernel(const uint8_t* storage, const uint8_t* storage_indices,
                                 const uint8_t* storage_features, const uint8_t* memory_in, uint8_t* memory_out,
                                 uint8_t* memory_features, uint64_t image, uint64_t descriptor);

// C-simulation entry for the ctypes binding (host/backends/hls.py). Returns 1 when the result header
// was written to memory, 0 when it could not be (misaligned or unreachable result_ptr, unreadable
// descriptor), and -1 on an internal error of the simulation (message in `error`, never expected).
// `counters_out` (SMARTSAGE_RUN_COUNTERS words, or null): draws, rejections, then the StorageTally's
// reads, bytes and distinct pages of the command.
#define SMARTSAGE_RUN_COUNTERS 5
extern "C" int smartsage_run(const uint8_t* storage, uint64_t storage_size, uint64_t image_addr,
                             uint8_t* memory, uint64_t memory_size, uint64_t descriptor_addr,
                             uint32_t max_fanout, uint32_t max_hops, uint8_t* result_out,
                             uint64_t* counters_out, char* error, uint64_t error_capacity);

// ABI check for the binding: bumps when smartsage_run's contract changes.
extern "C" uint32_t smartsage_abi_version(void);
