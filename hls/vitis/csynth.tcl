# Vitis HLS: C synthesis (and optionally C/RTL co-simulation) of the smartsage kernel.
# Run from the repository root:  vitis_hls -f hls/vitis/csynth.tcl
# Not runnable on the project's machines (no vendor tools); the C simulation runs with g++ instead
# (host/backends/hls.py, tests/test_hls.py).
open_project -reset build/vitis_hls/smartsage
set_top smartsage_kernel
# Kernel build limits: spec/config.py KernelConfig "default" (max_fanout 32, max_hops 4).
set cflags "-std=c++17 -Ihls/include -Ihls/src -DSMARTSAGE_MAX_FANOUT=32 -DSMARTSAGE_MAX_HOPS=4"
add_files hls/src/smartsage_kernel.cpp -cflags $cflags
open_solution -reset smartssd -flow_target vitis
# SmartSSD: Kintex UltraScale+ KU15P; kernels close at 200-300 MHz (KernelConfig.clock_mhz = 250).
set_part xcku15p-ffva1156-2-e
create_clock -period 4.0 -name default
config_interface -m_axi_addr64
csynth_design
export_design -format xo -output build/vitis_hls/smartsage_kernel.xo
exit
