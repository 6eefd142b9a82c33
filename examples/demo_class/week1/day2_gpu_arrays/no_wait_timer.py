"""Demo student: the classic unsynchronised timer, and two of the four answers right.

`gpu_time_ms` reads the clock around the call without ever waiting for the device, so it measures
how long queueing the work took: a few microseconds for work lasting milliseconds. Every duration,
visible and hidden, fails with a hint to wait before reading the clock. Q1 and Q4 are right; Q2
counts the addition's traffic once instead of twice and Q3 forgets that .cpu() waits.
"""

# %% gpu_time_ms
def gpu_time_ms(fn: Callable[[], object]) -> float:
    """Milliseconds of device time taken by one call of fn(), not counting work queued before it."""
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


# %% answers
# Q1. Suppose a link moves 25 GB/s (1 GB = 10**9 bytes). How many milliseconds does copying one
#     float32 tensor of 2**28 elements over it take? (float)
copy_ms_2_28 = 4 * 2**28 / 25e9 * 1e3

# Q2. Same link, and device memory at 3000 GB/s. Once that tensor x is on the GPU, x + 1 reads x
#     and writes a result of the same size. How many times longer does copying x to the GPU take
#     than computing x + 1 there, both at full bandwidth? (float)
copy_vs_add = 3000 / 25

# Q3. x is a CUDA tensor. Which of these lines make the host wait for the GPU? Answer with the
#     letters, e.g. "ae". (str)
#     a) y = x * 2     b) s = x.sum().item()     c) z = x.cpu()     d) torch.cuda.synchronize()
#     e) n = x.shape[0]
waiting_lines = "bd"

# Q4. A program handles 10 batches. Each is copied to the GPU (20 ms), then a kernel processes it
#     (30 ms). Copies can run while a kernel runs (pinned memory, non_blocking copies on a second
#     stream), but a batch's kernel needs its copy finished, and one kernel runs at a time. What
#     is the shortest total time for all 10 batches, in ms? (float)
overlapped_ms = 320.0
