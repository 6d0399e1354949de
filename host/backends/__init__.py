"""Driver backends: golden, rtl, hls, mmap, direct."""
