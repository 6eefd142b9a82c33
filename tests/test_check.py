import pytest
import torch

from course import check, spec
from tests.kernels import good_matmul, matmul_missing_one_element, matmul_multiples_of_64_only

SPEC = spec.get("w1d7.matmul_fp32")


def test_a_real_triton_kernel_passes_against_the_fp64_reference():
    results = check.check(SPEC, good_matmul, "visible")
    assert results and all(r.passed for r in results), [r.message for r in results]
    assert all(r.rel_error is not None and r.rel_error < SPEC.tolerance for r in results)


def test_one_unwritten_element_fails_and_is_located():
    results = check.check(SPEC, matmul_missing_one_element, "visible")
    assert not any(r.passed for r in results)
    assert "NaN" in results[0].message and "(0, 0)" in results[0].message


def test_a_kernel_right_only_for_multiples_of_64_fails():
    results = check.check(SPEC, matmul_multiples_of_64_only, [(64, 64, 64), (100, 70, 90)])
    assert results[0].passed, results[0].message
    assert not results[1].passed
    assert "M=100, N=70, K=90" in results[1].message


def test_wrong_dtype_is_refused():
    def returns_fp64(a, b):
        return good_matmul(a, b).double()

    result = check.check(SPEC, returns_fp64, [(16, 16, 16)])[0]
    assert not result.passed and "dtype" in result.message


def test_wrong_shape_is_refused():
    def returns_transposed(a, b):
        return good_matmul(a, b).t()

    result = check.check(SPEC, returns_transposed, [(16, 24, 8)])[0]
    assert not result.passed and "shape" in result.message


def test_a_stub_reports_not_implemented():
    def stub(a, b):
        raise NotImplementedError()

    result = check.check(SPEC, stub, [(8, 8, 8)])[0]
    assert not result.passed and "not implemented" in result.message


def test_correct_values_without_a_kernel_fail():
    def broadcast_sum(a, b):
        return (a[:, :, None] * b[None, :, :]).sum(dim=1)

    result = check.check(SPEC, broadcast_sum, [(8, 8, 8)])[0]
    assert not result.passed and "no Triton or CUDA kernel was launched" in result.message


def test_library_matmul_fails_with_the_call_named():
    result = check.check(SPEC, torch.matmul, [(8, 8, 8)])[0]
    assert not result.passed and "torch.matmul" in result.message


def test_nan_never_passes():
    def nans(a, b):
        out = good_matmul(a, b)
        out[0, 0] = float("nan")
        return out

    result = check.check(SPEC, nans, [(16, 16, 16)])[0]
    assert not result.passed


def test_assert_correct_raises_with_every_failing_shape():
    with pytest.raises(AssertionError) as caught:
        check.assert_correct(SPEC, matmul_multiples_of_64_only, [(64, 64, 64), (100, 70, 90), (1, 33, 65)])
    text = str(caught.value)
    assert "2 of 3 shapes failed" in text and "M=1, N=33, K=65" in text


@pytest.mark.gpu
def test_gpu_shapes_pass_for_a_correct_kernel():
    results = check.check(SPEC, good_matmul, "hidden")
    assert all(r.passed for r in results), [r.message for r in results]
