"""cocotb tests of the kernel (run by :func:`smartsage.cosim.runner.run_plan`, not collected by pytest).

A *plan* (JSON, path in ``SMARTSAGE_COSIM_PLAN``) names the image, the timing model, the backpressure
and a list of commands. Every command runs against fresh device memory with guard regions; the
scoreboard compares it with the golden model. Results (headers, outputs, cycles, wall time) go to
``SMARTSAGE_COSIM_RESULTS`` for the pytest side and the RTL backend.
"""

from __future__ import annotations

import json
import os
import time

import cocotb
import numpy as np
from cocotb.triggers import Timer

from smartsage.spec.config import KernelConfig
from smartsage.spec.descriptor import RESULT_HEADER_SIZE, ResultHeader
from smartsage.spec.image import GraphImage

from .axi_responder import Backpressure
from .scoreboard import CommandSpec, compare, layout_command, rtl_expectation
from .storage import SsdTiming
from .testbench import CTRL_AP_DONE, CTRL_AP_IDLE, KernelTB


@cocotb.test()
async def run_plan(dut):
    """Every command of the plan, bit-exact against the golden model, under backpressure and a watchdog."""
    with open(os.environ["SMARTSAGE_COSIM_PLAN"]) as f:
        plan = json.load(f)
    config = KernelConfig.from_json(plan["config"])
    seed = int(plan["seed"])
    dut._log.info("plan seed %d, %d commands, config %s", seed, len(plan["commands"]), config.name)
    timing = SsdTiming(**plan["timing"])
    tb = KernelTB(dut, config, plan["image"], timing, Backpressure(plan["backpressure"], seed),
                  image_base=int(plan["image_base"]))
    image = GraphImage(plan["image"])
    results = []
    failures = []
    await tb.reset()
    if plan.get("raw_cycles"):
        # raw simulator speed: the clock runs, inputs are held, no Python wakes per cycle
        wall = time.perf_counter()
        await Timer(int(plan["raw_cycles"]) * tb.period_ps, unit="ps")
        summary = {"results": [], "wall_s": time.perf_counter() - wall, "cycles": int(plan["raw_cycles"])}
        with open(os.environ["SMARTSAGE_COSIM_RESULTS"], "w") as f:
            json.dump(summary, f)
        image.close()
        return
    if plan.get("raw_memory"):
        await _run_raw(dut, tb, plan, config, image)
        image.close()
        return
    sim_start = time.perf_counter()
    for number, raw in enumerate(plan["commands"]):
        spec = CommandSpec.from_dict(raw)
        layout, initial = layout_command(image, spec, config)
        tb.storage.error_ranges = [(tb.image_base + a, tb.image_base + b) for a, b in spec.storage_errors]
        tb.memory.write_error_ranges = []
        tb.memory.read_error_ranges = []
        if spec.read_error is not None:
            name, offset = spec.read_error
            start = {"nodes": layout.nodes, "counts": layout.counts}[name] + offset
            tb.memory.read_error_ranges = [(start, start + 1)]
        if spec.write_error is not None:
            name, offset = spec.write_error
            start = {"nodes": layout.nodes, "counts": layout.counts, "self": layout.self_rows,
                     "sum": layout.sums}[name] + offset
            tb.memory.write_error_ranges = [(start, start + 1)]
        expect = rtl_expectation(image, spec, layout, initial, config, tb.image_base)
        tb.load_memory(initial)
        outcome = await tb.run_command(layout.descriptor, int(plan["watchdog_cycles"]), spec.image_offset)
        memory = tb.memory.data
        stray = tb.memory.check_untouched(initial, layout.buffers())
        problems = []
        if spec.write_error is not None and expect.error_value_range is not None:
            # writes are combined into bursts: the error names an address inside the burst that failed
            # (the one holding the faulty byte, the only write answered SLVERR)
            if tb.memory.write_failures:
                expect.error_value_range = tb.memory.write_failures[0]
            else:
                problems.append("the faulty byte was never written, no write failed")
        if outcome["hung"]:
            problems.append(f"no ap_done within {plan['watchdog_cycles']} cycles (watchdog)")
        else:
            if not outcome["ctrl"] & CTRL_AP_DONE or not outcome["ctrl"] & CTRL_AP_IDLE:
                problems.append(f"CTRL {outcome['ctrl']:#x} after the interrupt lacks ap_done/ap_idle")
            if outcome["ctrl_after_read"] & CTRL_AP_DONE:
                problems.append("ap_done did not clear on read")
            if outcome["interrupt_after_clear"]:
                problems.append("interrupt still high after clearing ISR")
            problems += compare(expect, layout, initial, memory, stray)
        header = ResultHeader.unpack(memory[layout.result:layout.result + RESULT_HEADER_SIZE].tobytes())
        id_dtype = image.header.index_dtype.numpy_dtype
        nodes = memory[layout.nodes:layout.nodes + layout.nodes_bytes].view(id_dtype)
        counts = memory[layout.counts:layout.counts + layout.counts_bytes].view(np.uint32)
        ok = header.status == 0 and expect.writes_result
        results.append({
            "command": number, "header": dataclass_dict(header) if expect.writes_result else None,
            "expected_status": int(expect.status),
            "problems": problems, "cycles": outcome["cycles"], "wall_s": outcome["wall_s"],
            "node_list": nodes[:header.nodes_written].tolist() if ok else [],
            "counts": counts[:header.counts_written].tolist() if ok else [],
            # AGGREGATE: the self and sum buffers as written (hex of their bytes)
            "self_rows": memory[layout.self_rows:layout.self_rows + layout.self_bytes].tobytes().hex()
            if ok and layout.self_bytes else "",
            "sums": memory[layout.sums:layout.sums + layout.sum_bytes].tobytes().hex()
            if ok and layout.sum_bytes else "",
            "storage": tb.storage.stats(), "storage_transactions": tb.storage_transactions,
            "storage_transactions_by_master": [port.transactions for port in tb.storage_ports],
            **outcome["storage_account"],  # this command's AXI reads on every m_axi_storage* (storage.ReadAccount)
        })
        if problems:
            failures.append(f"command {number} (seed {spec.seed}, fanouts {spec.fanouts}, "
                            f"{len(spec.targets)} targets): " + "; ".join(problems))
            dut._log.error(failures[-1])
        else:
            dut._log.info("command %d: status %d, %d edges, %d cycles, %.2f s", number, header.status,
                          header.edges_sampled, outcome["cycles"], outcome["wall_s"])
        if outcome["hung"]:
            break  # the kernel is stuck: later commands cannot run
    summary = {"results": results, "wall_s": time.perf_counter() - sim_start, "cycles": tb.cycle()}
    with open(os.environ["SMARTSAGE_COSIM_RESULTS"], "w") as f:
        json.dump(summary, f)
    image.close()
    assert not failures, f"plan seed {seed}: " + " | ".join(failures)


async def _run_raw(dut, tb, plan, config, image) -> None:
    """One command on a device memory given whole (the driver's), checked against the golden model.

    The memory comes from and goes back to ``.npy`` files. The expectation: the golden model's
    ``run_command`` on the same memory (AGGREGATE included); on OK
    the whole memory must be equal but for the result header's two counter fields, on an error the
    status and error fields.
    """
    from smartsage.spec import golden
    from smartsage.spec.descriptor import RESULT_FIELDS, Descriptor, Status

    initial = np.load(plan["raw_memory"])
    descriptor_addr = int(plan["raw_descriptor"])
    fields = Descriptor.unpack_raw(initial[descriptor_addr:descriptor_addr + 128].tobytes())
    expected = initial.copy()
    expected_header = golden.run_command(image, expected, descriptor_addr, config)
    tb.load_memory(initial)
    outcome = await tb.run_command(descriptor_addr, int(plan["watchdog_cycles"]), int(plan["raw_image_offset"]))
    memory = tb.memory.data
    np.save(plan["raw_memory"], memory)
    result_ptr = fields["result_ptr"]
    problems = []
    if outcome["hung"]:
        problems.append(f"no ap_done within {plan['watchdog_cycles']} cycles (watchdog)")
    elif result_ptr % 64 == 0 and result_ptr + RESULT_HEADER_SIZE <= memory.size:
        got = ResultHeader.unpack(memory[result_ptr:result_ptr + RESULT_HEADER_SIZE].tobytes())
        if got.spec_fields() != expected_header.spec_fields():
            problems.append(f"result {got.spec_fields()} != golden {expected_header.spec_fields()}")
        elif got.status == Status.OK:
            masked, reference = memory.copy(), expected.copy()
            for name in ("storage_bytes", "cycles"):
                offset = next(off for f, _, off, _ in RESULT_FIELDS if f == name)
                masked[result_ptr + offset:result_ptr + offset + 8] = 0
                reference[result_ptr + offset:result_ptr + offset + 8] = 0
            if not np.array_equal(masked, reference):
                first = int(np.flatnonzero(masked != reference)[0])
                problems.append(f"device memory differs from golden, first at {first:#x}")
    summary = {"results": [{"command": 0, "problems": problems, "cycles": outcome["cycles"],
                            "wall_s": outcome["wall_s"], "header": None, "storage": tb.storage.stats(),
                            **outcome["storage_account"]}],
               "wall_s": outcome["wall_s"], "cycles": tb.cycle()}
    with open(os.environ["SMARTSAGE_COSIM_RESULTS"], "w") as f:
        json.dump(summary, f)
    assert not problems, "; ".join(problems)


def dataclass_dict(header: ResultHeader) -> dict:
    import dataclasses

    return {k: int(v) for k, v in dataclasses.asdict(header).items()}
