"""course.divergence: each known interpreter/GPU divergence is found in a small kernel's source, a clean
kernel gives none, and the ban on library calls (ExerciseSpec.forbidden_calls) holds in the notebook's
checks and in the judge."""

import textwrap

import pytest
import triton
import triton.language as tl

from course import check, divergence, spec
from course.divergence import KernelSource
from grader.judge import kernel_source
from grader.kernel_build import build_kernels

DAY6 = spec.get("w1d6.matmul_outer")
DAY7 = spec.get("w1d7.matmul_fp32")

CLEAN = """
@triton.jit
def clean(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
          BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    cols = tl.program_id(1) * BN + tl.arange(0, BN)
    ks = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        a = tl.load(a_ptr + rows[:, None] * sam + (k0 + ks)[None, :] * sak,
                    mask=(rows[:, None] < M) & ((k0 + ks)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k0 + ks)[:, None] * sbk + cols[None, :] * sbn,
                    mask=((k0 + ks)[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
        for kk in tl.static_range(BK):
            col = tl.load(a_ptr + rows * sam + kk * sak, mask=rows < M, other=0.0)
            row = tl.load(b_ptr + kk * sbk + cols * sbn, mask=cols < N, other=0.0)
            acc += col[:, None] * row[None, :]
    tl.store(c_ptr + rows[:, None] * scm + cols[None, :] * scn, acc, mask=(rows[:, None] < M) & (cols[None, :] < N))
"""


def kernel(body: str, name: str = "k", signature: str = "a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr",
           **aliases: str) -> dict[str, KernelSource]:
    source = f"@triton.jit\ndef {name}({signature}):\n" + textwrap.indent(textwrap.dedent(body).strip(), "    ")
    return {name: KernelSource(name, source, 1, aliases)}


def codes(kernels: dict[str, KernelSource], precision_matters: bool = True) -> list[str]:
    return [d.code for d in divergence.scan(kernels, precision_matters=precision_matters)]


def test_a_clean_tiled_kernel_gives_no_warning():
    assert divergence.scan({"clean": KernelSource("clean", CLEAN)}) == []
    assert divergence.report([]) == ""


@pytest.mark.parametrize("call", ["tl.dot(a, a)", "tl.dot(a, a, acc)", 'tl.dot(a, a, input_precision="tf32")',
                                  "tl.dot(a, a, allow_tf32=True)", "triton.language.dot(a, a)"])
def test_a_dot_that_may_use_tf32_is_found(call):
    found = divergence.scan(kernel(f"""
        r = tl.arange(0, BLOCK)
        a = tl.load(a_ptr + r[:, None] * BLOCK + r[None, :])
        acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
        c = {call}
        tl.store(c_ptr + r[:, None] * BLOCK + r[None, :], c)
    """))
    tf32 = [d for d in found if d.code == "tf32-dot"]
    assert len(tf32) == 1 and tf32[0].line == 6, found
    assert "TF32" in tf32[0].text() and 'input_precision="ieee"' in tf32[0].text()


@pytest.mark.parametrize("call", ['tl.dot(a, a, input_precision="ieee")', "tl.dot(a, a, allow_tf32=False)",
                                  "tl.dot(a, a, None, PRECISION)"])
def test_an_ieee_dot_or_one_chosen_at_launch_is_not_flagged(call):
    assert "tf32-dot" not in codes(kernel(f"""
        r = tl.arange(0, BLOCK)
        a = tl.load(a_ptr + r[:, None] * BLOCK + r[None, :], mask=r[:, None] < n)
        tl.store(c_ptr + r[:, None] * BLOCK + r[None, :], {call}, mask=r[:, None] < n)
    """, signature="a_ptr, c_ptr, n, BLOCK: tl.constexpr, PRECISION: tl.constexpr"))


def test_precision_warnings_stand_aside_when_the_tolerance_allows_tf32():
    source = kernel("""
        r = tl.arange(0, BLOCK)
        a = tl.load(a_ptr + r[:, None] * BLOCK + r[None, :], mask=r[:, None] < n)
        tl.store(c_ptr + r[:, None] * BLOCK + r[None, :], tl.dot(a, a), mask=r[:, None] < n)
    """)
    assert codes(source) == ["tf32-dot"]
    assert codes(source, precision_matters=False) == []


@pytest.mark.parametrize("update", [
    "acc += tl.sum(a[:, :, None] * b[None, :, :], axis=1)",
    "prod = a[:, :, None] * b[None, :, :]\nacc += tl.sum(prod, 1)",
    "acc += tl.sum(tl.expand_dims(a, 2) * tl.expand_dims(b, 0), axis=1)",
    "acc += (a[:, :, None] * b[None]).sum(1)",
])
def test_a_sum_of_broadcast_products_is_found(update):
    body = """
        r = tl.arange(0, BLOCK)
        m = r[:, None] < n
        a = tl.load(a_ptr + r[:, None] * BLOCK + r[None, :], mask=m, other=0.0)
        b = tl.load(b_ptr + r[:, None] * BLOCK + r[None, :], mask=m, other=0.0)
        acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    """
    body = textwrap.dedent(body) + update + "\ntl.store(c_ptr + r[:, None] * BLOCK + r[None, :], acc, mask=m)"
    assert codes(kernel(body)) == ["sum-to-dot"]


@pytest.mark.parametrize("update", [
    "acc += tl.sum(a, axis=1)[:, None] * tl.sum(b, axis=0)[None, :]",  # a rank-1 update: no broadcast summed
    "acc += tl.sum(a * b, axis=0)[None, :]",  # an elementwise product: no broadcast
    "acc += tl.sum(a[:, None] * b, axis=0)",  # 2-D: not the 3-D pattern the compiler rewrites
    "acc += tl.sum(b[None, :, :] * a[:, :, None], axis=1)",  # the other order: Triton 3.6 keeps it in fp32
])
def test_sums_the_compiler_leaves_alone_are_not_flagged(update):
    body = textwrap.dedent("""
        r = tl.arange(0, BLOCK)
        m = r[:, None] < n
        a = tl.load(a_ptr + r[:, None] * BLOCK + r[None, :], mask=m, other=0.0)
        b = tl.load(b_ptr + r[:, None] * BLOCK + r[None, :], mask=m, other=0.0)
        acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    """) + update + "\ntl.store(c_ptr + r[:, None] * BLOCK + r[None, :], acc, mask=m)"
    assert codes(kernel(body)) == []


def test_a_read_modify_write_shared_by_every_program_is_found():
    found = divergence.scan(kernel("""
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(a_ptr + offs, mask=offs < n, other=0.0)
        total = tl.load(c_ptr)
        tl.store(c_ptr, total + tl.sum(x, axis=0))
    """))
    assert [(d.code, d.line) for d in found] == [("lost-update", 6)]
    assert "c_ptr" in found[0].detail and "atomic" in found[0].text()


def test_a_read_modify_write_at_addresses_read_from_data_is_found():
    assert codes(kernel("""
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        bins = tl.load(a_ptr + offs, mask=offs < n, other=0)
        counts = tl.load(c_ptr + bins, mask=offs < n, other=0)
        tl.store(c_ptr + bins, counts + 1, mask=offs < n)
    """)) == ["lost-update"]


@pytest.mark.parametrize("body", [
    # each program reads and writes its own block (an in-place update)
    """
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(c_ptr + offs, mask=offs < n, other=0.0)
    tl.store(c_ptr + offs, x * 2.0, mask=offs < n)
    """,
    # only program 0 updates the shared value
    """
    pid = tl.program_id(0)
    if pid == 0:
        total = tl.load(c_ptr)
        tl.store(c_ptr, total + 1.0)
    """,
    # atomics: the GPU way to share one output
    """
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(a_ptr + offs, mask=offs < n, other=0.0)
    tl.atomic_add(c_ptr, tl.sum(x, axis=0))
    """,
])
def test_updates_that_cannot_race_are_not_flagged(body):
    assert codes(kernel(body)) == []


def test_a_block_access_without_a_mask_is_found():
    found = divergence.scan(kernel("""
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(a_ptr + offs)
        tl.store(c_ptr + offs, x + tl.load(b_ptr))
    """))
    assert [(d.code, d.detail.split(" of ")[0]) for d in found] == [("unchecked-address", "tl.load"),
                                                                     ("unchecked-address", "tl.store")]


def test_a_block_pointer_needs_a_boundary_check():
    body = """
        p = tl.make_block_ptr(base=a_ptr, shape=(n, n), strides=(n, 1), offsets=(tl.program_id(0) * BLOCK, 0),
                              block_shape=(BLOCK, BLOCK), order=(1, 0))
        x = tl.load(p{check})
        q = tl.make_block_ptr(base=c_ptr, shape=(n, n), strides=(n, 1), offsets=(tl.program_id(0) * BLOCK, 0),
                              block_shape=(BLOCK, BLOCK), order=(1, 0))
        tl.store(q, x{check})
    """
    assert codes(kernel(body.format(check=""))) == ["unchecked-address", "unchecked-address"]
    assert codes(kernel(body.format(check=", boundary_check=(0, 1)"))) == []


# --- live functions: the kernels a wrapper launches, found through its globals -----------------------------

dot_alias = tl.dot


@triton.jit
def _helper_dot(a, b):
    return tl.dot(a, b)


@triton.jit
def _calls_helper(a_ptr, c_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    a = tl.load(a_ptr + r[:, None] * BLOCK + r[None, :])
    tl.store(c_ptr + r[:, None] * BLOCK + r[None, :], _helper_dot(a, a))


@triton.jit
def _aliased_dot(a_ptr, c_ptr, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    m = r[:, None] < BLOCK
    a = tl.load(a_ptr + r[:, None] * BLOCK + r[None, :], mask=m, other=0.0)
    tl.store(c_ptr + r[:, None] * BLOCK + r[None, :], dot_alias(a, a, input_precision="ieee"), mask=m)


def _launch_through_helper(a):
    _calls_helper[(1,)](a, a, BLOCK=16)


def _launcher(a):
    _launch_through_helper(a)


def test_kernels_are_found_through_wrappers_globals_and_called_kernels():
    kernels, roots = divergence.kernels_of(_launcher)
    assert roots == ["_calls_helper"] and set(kernels) == {"_calls_helper", "_helper_dot"}
    found = divergence.check_function(_launcher)
    assert {(d.code, d.kernel) for d in found} == {("tf32-dot", "_helper_dot"), ("unchecked-address", "_calls_helper")}
    assert divergence.forbidden_problem(kernels, roots, ["tl.dot"]).startswith("_helper_dot, line")


def test_a_global_alias_of_tl_dot_is_still_tl_dot():
    kernels, roots = divergence.kernels_of(lambda a: _aliased_dot[(1,)](a, a, BLOCK=16))
    assert roots == ["_aliased_dot"] and kernels["_aliased_dot"].aliases["dot_alias"] == "tl.dot"
    assert "calls tl.dot" in divergence.forbidden_problem(kernels, roots, DAY6.forbidden_calls)
    assert divergence.scan(kernels, roots) == []  # ieee: no warning


@pytest.mark.parametrize("call", ["getattr(tl, 'dot')(a, a)", "OP(a, a)", "ops[0](a, a)"])
def test_a_call_the_reader_cannot_resolve_breaks_a_ban(call):
    source = kernel(f"""
        r = tl.arange(0, BLOCK)
        a = tl.load(a_ptr + r[:, None] * BLOCK + r[None, :], mask=r[:, None] < n, other=0.0)
        tl.store(c_ptr + r[:, None] * BLOCK + r[None, :], {call}, mask=r[:, None] < n)
    """, signature="a_ptr, c_ptr, n, ops, BLOCK: tl.constexpr, OP: tl.constexpr")
    problem = divergence.forbidden_problem(source, ["k"], ["tl.dot"])
    assert problem and "cannot tell" in problem
    assert divergence.forbidden_problem(source, ["k"], []) is None


def test_library_calls_without_a_ban_are_listed_not_refused():
    calls, unresolved = divergence.library_calls({"clean": KernelSource("clean", CLEAN)}, ["clean"])
    assert {"tl.dot", "tl.load", "tl.store", "tl.static_range"} <= set(calls) and unresolved == []
    assert divergence.forbidden_problem({"clean": KernelSource("clean", CLEAN)}, ["clean"], ["tl.dot"])


def test_normalize_gives_one_name_per_library_function():
    assert divergence.normalize("triton.language.core.dot") == "tl.dot"
    assert divergence.normalize("triton.language.standard.sum") == "tl.sum"
    assert divergence.normalize("tl.core.dot") == "tl.dot"
    assert divergence.normalize("triton.language") == "tl"
    assert divergence.normalize("tl.math.exp") == "tl.math.exp"


# --- course.check: warnings on a CPU, the ban on both devices -------------------------------------------------

@triton.jit
def _seed_style_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ks = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
    for k0 in range(0, K, BLOCK):
        a = tl.load(a_ptr + rows[:, None] * sam + (k0 + ks)[None, :] * sak,
                    mask=(rows[:, None] < M) & ((k0 + ks)[None, :] < K), other=0.0)
        b = tl.load(b_ptr + (k0 + ks)[:, None] * sbk + cols[None, :] * sbn,
                    mask=((k0 + ks)[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rows[:, None] * scm + cols[None, :] * scn, acc, mask=(rows[:, None] < M) & (cols[None, :] < N))


def seed_style_matmul(a, b):
    import torch

    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    _seed_style_kernel[(triton.cdiv(M, 16), triton.cdiv(N, 16))](
        a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1), BLOCK=16)
    return c


def test_check_warns_on_a_cpu_about_a_seed_style_dot_and_still_passes_it(capsys):
    from course import device

    if not device.info().interpret:
        pytest.skip("the warnings are printed only in the CPU interpreter")
    results = check.check(DAY7, seed_style_matmul, [(20, 18, 24)])
    assert results[0].passed, results[0].message
    printed = capsys.readouterr().out
    assert "[tf32-dot] _seed_style_kernel, line" in printed and "seed_style_matmul" in printed


def test_check_fails_a_forbidden_call_without_running_it():
    results = check.check(DAY6, seed_style_matmul, [(20, 18, 24), (5, 7, 9)])
    assert [r.passed for r in results] == [False, False]
    assert "calls tl.dot, which this exercise asks you to do without" in results[0].message
    assert results[0].message.startswith("M=20, N=18, K=24: _seed_style_kernel, line")


def test_a_broken_reader_never_breaks_the_check(monkeypatch, capsys):
    def explode(*args, **kwargs):
        raise RuntimeError("reader bug")

    monkeypatch.setattr(divergence, "check_function", explode)
    assert check.warn_divergences(DAY7, seed_style_matmul) == []


# --- the judge: the same reading, from the notebook's source alone ------------------------------------------

NOTEBOOK_CELLS = [
    "import triton\nimport triton.language as tl\nmydot = tl.dot\n",
    CLEAN.replace("def clean", "def uses_dot"),
    CLEAN.replace("def clean", "def via_alias").replace("tl.dot(a, b, acc,", "mydot(a, b, acc,"),
    textwrap.dedent("""
        @triton.jit
        def rank1(a_ptr, c_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            x = tl.load(a_ptr + offs)
            tl.store(c_ptr + offs, x * 2.0)
    """),
]


def test_read_definitions_keeps_kernel_sources_and_library_aliases():
    definitions = build_kernels.read_definitions(NOTEBOOK_CELLS)
    assert set(definitions.sources) == {"uses_dot", "via_alias", "rank1"}
    assert definitions.aliases == {"mydot": "tl.dot"}
    source, first = definitions.sources["rank1"]
    assert source.startswith("def rank1(") and first == 3


@pytest.mark.parametrize(("kernel_name", "banned"), [("uses_dot", True), ("via_alias", True), ("rank1", False)])
def test_the_judge_refuses_a_launch_whose_kernel_reaches_a_forbidden_call(kernel_name, banned):
    definitions = build_kernels.read_definitions(NOTEBOOK_CELLS)
    plan = {"launches": [{"kernel": kernel_name}]}
    problem = kernel_source.forbidden_problem(DAY6, plan, definitions)
    assert (problem is not None and "calls tl.dot" in problem) is banned
    assert kernel_source.forbidden_problem(DAY7, plan, definitions) is None  # Day 7 bans nothing


def test_cpu_verdicts_carry_notes_on_divergences_of_the_launched_kernels():
    definitions = build_kernels.read_definitions(NOTEBOOK_CELLS)
    calls = {"visible-0": {"plan": {"launches": [{"kernel": "rank1"}]}}, "bogus": "not a dict"}
    notes = kernel_source.divergence_notes(DAY6, calls, definitions)
    assert len(notes) == 2 and all(n.startswith("NOTE the GPU may disagree: [unchecked-address] rank1") for n in notes)
    assert kernel_source.divergence_notes(DAY6, {"visible-0": {"plan": {"launches": [{"kernel": "uses_dot"}]}}},
                                  definitions) == []


def test_a_reader_failure_in_the_judge_refuses_a_ban_and_drops_only_the_notes(monkeypatch):
    definitions = build_kernels.read_definitions(NOTEBOOK_CELLS)
    plan = {"launches": [{"kernel": "rank1"}]}

    def explode(*args, **kwargs):
        raise RecursionError("deep")

    monkeypatch.setattr(divergence, "forbidden_problem", explode)
    monkeypatch.setattr(divergence, "scan", explode)
    problem = kernel_source.forbidden_problem(DAY6, plan, definitions)
    assert "could not read the kernels' source (RecursionError)" in problem
    assert kernel_source.divergence_notes(DAY6, {"visible-0": {"plan": plan}}, definitions) == []
