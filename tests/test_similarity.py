"""Similar submissions (grader/report/similarity.py): a class laid out as the grader stores it, the similarity page
read back.

The class of Week 1 Day 7 is made of released notebooks with answer cells filled (``grader.authoring.demo.fill``), found
and sanitized as grading does (``find_submissions``, ``sanitize``, ``stored.run_dir``) but not run: alice
wrote her kernel, bob handed in alice's with every name changed, carol wrote her own, dan left the stubs and
eve submitted nothing (a sanitized notebook of alice's lies in eve's run folder from an earlier batch). All
of them give the same quiz answers. The page must list alice and bob, and nobody else.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import nbformat
import pytest

from grader.authoring import demo
from grader.intake.layout import find_course_notebook, find_submissions
from grader.intake.sanitize import sanitize
from grader.report import similarity
from grader.score import results, stored
from grader.score.results import NotebookResult

ASSIGNMENT, NOTEBOOK = "week1", "day7_fast_matmul"
QUIZ = """flops_4096 = 2 * 4096**3
a_reads_per_element = 1024 // 64
step_intensity = 2 * 64 * 64 * 32 / ((64 * 32 + 32 * 64) * 4)
tf32_would_pass = False
"""
HOSTILE = '# </pre><script>document.title="pwned"</script>'

ALICE = '''@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """Compute one BLOCK_M x BLOCK_N tile of C = A @ B in fp32, walking along K."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    row_ok = rows < M
    col_ok = cols < N

    a_ptrs = a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = (k0 + ks) < K
        a = tl.load(a_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc, mask=row_ok[:, None] & col_ok[None, :])


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Return a @ b for fp32 matrices a (M, K) and b (K, N) on one device, using matmul_kernel."""
    M, K = a.shape
    K_b, N = b.shape
    assert K == K_b, f"inner dimensions differ: {tuple(a.shape)} @ {tuple(b.shape)}"
    c = torch.empty((M, N), device=a.device, dtype=torch.float32)
    block_m, block_n, block_k = 32, 32, 32
    grid = (triton.cdiv(M, block_m), triton.cdiv(N, block_n))
    matmul_kernel[grid](
        a, b, c,
        M, N, K,
        a.stride(0), a.stride(1),
        b.stride(0), b.stride(1),
        c.stride(0), c.stride(1),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
    )
    return c
'''

BOB = '''@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """Compute one BLOCK_M x BLOCK_N tile of C = A @ B in fp32, walking along K."""
    # my tile of C
    tile_row = tl.program_id(0)
    tile_col = tl.program_id(1)
    r = tile_row * BLOCK_M + tl.arange(0, BLOCK_M)
    c = tile_col * BLOCK_N + tl.arange(0, BLOCK_N)
    kk = tl.arange(0, BLOCK_K)
    in_m = r < M
    in_n = c < N

    pa = a_ptr + r[:, None] * stride_am + kk[None, :] * stride_ak
    pb = b_ptr + kk[:, None] * stride_bk + c[None, :] * stride_bn
    total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start in range(0, K, BLOCK_K):
        in_k = (start + kk) < K
        x = tl.load(pa, mask=in_m[:, None] & in_k[None, :], other=0.0)
        y = tl.load(pb, mask=in_k[:, None] & in_n[None, :], other=0.0)
        total = tl.dot(x, y, total, input_precision="ieee")
        pa += BLOCK_K * stride_ak
        pb += BLOCK_K * stride_bk

    pc = c_ptr + r[:, None] * stride_cm + c[None, :] * stride_cn
    tl.store(pc, total, mask=in_m[:, None] & in_n[None, :])


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Return a @ b for fp32 matrices a (M, K) and b (K, N) on one device, using matmul_kernel."""
    rows, inner = a.shape
    inner_b, cols = b.shape
    assert inner == inner_b, "shapes do not match"
    out = torch.empty((rows, cols), device=a.device, dtype=torch.float32)
    bm, bn, bk = 32, 32, 32
    grid = (triton.cdiv(rows, bm), triton.cdiv(cols, bn))
    matmul_kernel[grid](
        a, b, out,
        rows, cols, inner,
        a.stride(0), a.stride(1),
        b.stride(0), b.stride(1),
        out.stride(0), out.stride(1),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
    )
    return out
'''

CAROL = '''@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr,
    M, N, K,
    stride_am, stride_ak,
    stride_bk, stride_bn,
    stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """Compute one BLOCK_M x BLOCK_N tile of C = A @ B in fp32, walking along K."""
    m0 = tl.program_id(0) * BLOCK_M
    n0 = tl.program_id(1) * BLOCK_N
    om = m0 + tl.arange(0, BLOCK_M)
    on = n0 + tl.arange(0, BLOCK_N)
    result = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    steps = tl.cdiv(K, BLOCK_K)
    for step in range(steps):
        ok = step * BLOCK_K + tl.arange(0, BLOCK_K)
        tile_a = tl.load(a_ptr + om[:, None] * stride_am + ok[None, :] * stride_ak,
                         mask=(om[:, None] < M) & (ok[None, :] < K), other=0.0)
        tile_b = tl.load(b_ptr + ok[:, None] * stride_bk + on[None, :] * stride_bn,
                         mask=(ok[:, None] < K) & (on[None, :] < N), other=0.0)
        result += tl.dot(tile_a, tile_b, input_precision="ieee")
    where = c_ptr + om[:, None] * stride_cm + on[None, :] * stride_cn
    tl.store(where, result, mask=(om[:, None] < M) & (on[None, :] < N))


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Return a @ b for fp32 matrices a (M, K) and b (K, N) on one device, using matmul_kernel."""
    if a.shape[1] != b.shape[0]:
        raise ValueError("a and b cannot be multiplied")
    out = torch.empty((a.shape[0], b.shape[1]), device=a.device, dtype=torch.float32)
    launch = lambda meta: (triton.cdiv(a.shape[0], meta["BLOCK_M"]), triton.cdiv(b.shape[1], meta["BLOCK_N"]))
    matmul_kernel[launch](a, b, out, a.shape[0], b.shape[1], a.shape[1],
                          a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1),
                          BLOCK_M=32, BLOCK_N=32, BLOCK_K=16)
    return out
'''
BOB = BOB.replace("    # my tile of C\n", f"    {HOSTILE}\n")  # a student's text stays text on the page


def _submit(root: Path, student: str, answers: dict[str, str]) -> None:
    notebook = find_course_notebook(ASSIGNMENT, NOTEBOOK)
    path = root / student / ASSIGNMENT / f"{NOTEBOOK}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(demo.fill(notebook, answers), str(path))


def _graded_class(root: Path, out: Path) -> list[NotebookResult]:
    """The class's submissions found and sanitized as ``pipeline.grade`` does, the sanitized notebooks stored where
    it stores them; each result as a run that ended normally would leave it (scores aside)."""
    for student, kernel in (("alice", ALICE), ("bob", BOB), ("carol", CAROL)):
        _submit(root, student, {"matmul_kernel": kernel, "answers": QUIZ})
    _submit(root, "dan", {"answers": QUIZ})
    (root / "eve" / ASSIGNMENT).mkdir(parents=True)
    submissions, _ = find_submissions(root)
    all_results = []
    for submission in (s for s in submissions if s.notebook == NOTEBOOK):
        if submission.path is None:
            all_results.append(NotebookResult(submission.student, ASSIGNMENT, NOTEBOOK,
                                              submission.status or results.MISSING, student_id=submission.student_id))
            continue
        cleaned = sanitize(submission.path, ASSIGNMENT, NOTEBOOK, submission.student, "")
        assert cleaned.notebook is not None, cleaned.message
        run = stored.run_dir(out, submission)
        run.mkdir(parents=True, exist_ok=True)
        nbformat.write(cleaned.notebook, str(run / "sanitized.ipynb"))
        all_results.append(NotebookResult(submission.student, ASSIGNMENT, NOTEBOOK, results.OK,
                                          student_id=submission.student_id))
    [eve] = [r for r in all_results if r.student == "eve"]
    assert eve.status == results.MISSING
    stale = similarity.sanitized_path(out, eve)  # an earlier batch's notebook: eve has none now
    stale.parent.mkdir(parents=True)
    stale.write_bytes(similarity.sanitized_path(out, all_results[0]).read_bytes())
    return all_results


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root, out = tmp_path_factory.mktemp("subs"), tmp_path_factory.mktemp("out")
    all_results = _graded_class(root, out)
    started = time.monotonic()
    page = similarity.write_similarity_page(out, all_results)
    return {"out": out, "results": all_results, "page": page, "text": page.read_text(encoding="utf-8"),
            "seconds": time.monotonic() - started}


def test_the_stored_notebooks_are_where_the_grader_keeps_them(graded):
    for result in graded["results"]:
        if result.status == results.OK:
            assert similarity.sanitized_path(graded["out"], result).is_file()


def test_the_page_lists_the_copied_kernel_and_nobody_else(graded):
    [view] = similarity.build(graded["out"], graded["results"])
    assert view.key == f"{ASSIGNMENT}/{NOTEBOOK}"
    assert [(p.a.student, p.b.student) for p in view.pairs] == [("alice", "bob")]
    [pair] = view.pairs
    assert pair.share_a > 0.9 and pair.share_b > 0.9, (pair.share_a, pair.share_b)
    # carol shares the stubs, the course's code and the quiz answers with everybody: not alike beyond that
    assert view.median is not None and view.median < similarity.THRESHOLD
    assert view.students == 3 and view.pairs_compared == 3  # alice, bob, carol; eve's stale notebook is not read
    assert view.without_code == ["dan"]  # the stubs as released: nothing of his own
    assert pair.a.cells == ["answer cell matmul_kernel"]  # the quiz answers are not compared
    text = graded["text"]
    assert text.count('<tr class="pair">') == 1
    row = re.search(r'<tr class="pair">(.*?)</tr>', text, re.S).group(1)
    assert "alice" in row and "bob" in row and "carol" not in row and "dan" not in row
    assert "A list for a TA to read, never a penalty." in text


def test_the_shared_lines_are_marked_side_by_side(graded):
    text = graded["text"]
    codes = re.findall(r'<pre class="shared-code">(.*?)</pre>', text, re.S)
    assert len(codes) == 2 and all("<mark>" in code for code in codes)
    alice, bob = codes
    marked_bob = "".join(re.findall(r"<mark>(.*?)</mark>", bob, re.S))
    assert "tile_row = tl.program_id(0)" in marked_bob and "tl.dot(x, y, total" in marked_bob
    assert "tl.dot(a, b, acc" in "".join(re.findall(r"<mark>(.*?)</mark>", alice, re.S))
    assert 'href="feedback/alice/week1-day7_fast_matmul.html"' in text


def test_the_page_is_static_and_student_text_stays_text(graded):
    text = graded["text"]
    assert "<script" not in text.lower() and "&lt;script&gt;" in text
    assert not re.findall(r'(?:src|href)\s*=\s*["\']?\s*(?:https?:)?//', text, re.I)
    assert graded["seconds"] < 30, graded["seconds"]


def test_a_class_with_nothing_alike_says_so(tmp_path):
    all_results = _graded_class(tmp_path / "subs", tmp_path / "out")
    honest = [r for r in all_results if r.student != "bob"]
    text = similarity.write_similarity_page(tmp_path / "out", honest).read_text(encoding="utf-8")
    assert 'id="no-pairs"' in text and '<tr class="pair">' not in text


# CUDA C held in a string constant (Week 2's SGEMM ladder): compared as C, not as one Python string.
SGEMM_OWN = '''SGEMM_V1 = r"""
extern "C" __global__ void sgemm_v1(const float* A, const float* B, float* C, int M, int N, int K)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k)
            acc += A[row * K + k] * B[k * N + col];
        C[row * N + col] = acc;
    }
}
"""
'''
SGEMM_RENAMED = '''KERNEL_SOURCE = r"""
extern "C" __global__ void sgemm_v1(const float* X, const float* Y, float* Z, int rows, int cols, int inner)
{
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    int i = blockIdx.y * blockDim.y + threadIdx.y;
    if (i < rows && j < cols) {
        float sum = 0.0f;
        for (int t = 0; t < inner; ++t)
            sum += X[i * inner + t] * Y[t * cols + j];
        Z[i * cols + j] = sum;
    }
}
"""
'''
SGEMM_OTHER = '''SGEMM_V1 = r"""
extern "C" __global__ void sgemm_v1(const float* __restrict__ A, const float* __restrict__ B,
                                    float* __restrict__ C, int M, int N, int K)
{
    const int n = blockIdx.x * 32 + (threadIdx.x % 32);
    const int m = blockIdx.y * 8 + threadIdx.x / 32;
    if (m >= M || n >= N) return;
    const float* arow = A + (size_t)m * K;
    float total = 0.0f;
    int k = 0;
    while (k < K) { total = fmaf(arow[k], __ldg(B + (size_t)k * N + n), total); k++; }
    C[(size_t)m * N + n] = total;
}
"""
'''


def test_a_cuda_kernel_in_a_string_is_compared_as_c():
    released = similarity._released("week2", "bonus_sgemm_ladder")
    codes = [similarity.Code(name, f"{name}.html", f"# ── answer cell sgemm_v1 ──\n{source}")
             for name, source in (("ann", SGEMM_OWN), ("ben", SGEMM_RENAMED), ("cat", SGEMM_OTHER))]
    pairs, empty, compared, _ = similarity.similar_pairs(codes, released)
    assert compared == 3 and not empty
    assert [(p.a.student, p.b.student) for p in pairs] == [("ann", "ben")]
    marked = "".join(re.findall(r"<mark>(.*?)</mark>", str(pairs[0].marked_b), re.S))
    assert "sum += X[i * inner + t] * Y[t * cols + j];" in marked


def test_an_unchanged_notebook_is_read_back_and_a_changed_one_compared_again(tmp_path, monkeypatch):
    out = tmp_path / "out"
    all_results = _graded_class(tmp_path / "subs", out)
    first = similarity.write_similarity_page(out, all_results).read_text(encoding="utf-8")

    def compare_again(*args, **kwargs):
        raise AssertionError("compared again, though no code changed")

    with monkeypatch.context() as patched:
        patched.setattr(similarity, "similar_pairs", compare_again)
        assert similarity.write_similarity_page(out, all_results).read_text(encoding="utf-8") == first
    [bob] = [r for r in all_results if r.student == "bob"]
    stored = similarity.sanitized_path(out, bob)
    nb = nbformat.read(str(stored), as_version=4)
    for cell in nb.cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "matmul_kernel":
            cell.source = CAROL.replace("result", "total_sum")  # regraded: bob now hands in carol's
    nbformat.write(nb, str(stored))
    [view] = similarity.build(out, all_results)
    assert [(p.a.student, p.b.student) for p in view.pairs] == [("bob", "carol")]


def test_a_notebook_that_cannot_be_compared_is_said_and_the_page_still_written(tmp_path, monkeypatch):
    all_results = _graded_class(tmp_path / "subs", tmp_path / "out")

    def broken(*args, **kwargs):
        raise ValueError("a tokenizer gave up")

    monkeypatch.setattr(similarity, "similar_pairs", broken)
    text = similarity.write_similarity_page(tmp_path / "out", all_results).read_text(encoding="utf-8")
    assert "not compared: ValueError: a tokenizer gave up" in text and '<tr class="pair">' not in text
    assert 'id="no-pairs"' not in text  # not compared is not "nothing alike"
    assert not (tmp_path / "out" / similarity.CACHE).exists()  # nothing kept: the next page tries again


def test_many_alike_pairs_are_all_listed_and_the_most_alike_shown(tmp_path, monkeypatch):
    monkeypatch.setattr(similarity, "SHOWN", 1)
    all_results = _graded_class(tmp_path / "subs", tmp_path / "out")
    [view] = similarity.build(tmp_path / "out", all_results, threshold=0.1)
    assert len(view.pairs) == 3  # with a low threshold, carol's pairs are listed too
    text = similarity.render([view], threshold=0.1)
    assert text.count('<tr class="pair">') == 3 and text.count('<pre class="shared-code">') == 2
    assert "The code of the 1 most alike pairs is shown below; the table lists all 3." in text


def test_without_its_stored_notebook_a_result_is_read_from_its_answer_cells(tmp_path):
    out = tmp_path / "out"
    all_results = _graded_class(tmp_path / "subs", out)
    [alice] = [r for r in all_results if r.student == "alice"]
    stored = similarity.sanitized_path(out, alice)
    nb = nbformat.read(str(stored), as_version=4)
    alice.code = [{"id": c.metadata.nbgrader["grade_id"], "source": c.source} for c in nb.cells
                  if c.get("metadata", {}).get("nbgrader", {}).get("solution")]  # as assemble._result keeps them
    stored.unlink()
    [view] = similarity.build(out, all_results)
    assert [(p.a.student, p.b.student) for p in view.pairs] == [("alice", "bob")]
    assert view.pairs[0].a.cells == ["answer cell matmul_kernel"]  # the quiz answers are still left out
