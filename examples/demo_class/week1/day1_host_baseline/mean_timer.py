"""Demo student: a timer that reports the mean of every call, warm-up included.

It times `warmup + repeats` calls in one stretch and divides by their number, so the slow first calls
and the outliers are all in it: the check's workloads come out at two to three times their true
steady time, and both timer items fail with a message saying so. Everything else is the course's own
solution: full marks for the matmul and the five answers.
"""

# %% all < solution

# %% median_timer
def median_time_ms(fn: Callable[[], object], warmup: int, repeats: int) -> float:
    """Average time of one call of fn() in milliseconds."""
    calls = warmup + repeats
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) * 1e3 / calls
