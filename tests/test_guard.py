import numpy as np
import pytest
import torch
import torch.nn.functional as F

from course.guard import ForbiddenCallError, Guard
from tests.conftest import HAS_GPU
from tests.kernels import good_matmul

DEVICE = "cuda" if HAS_GPU else "cpu"


def _pair():
    return torch.randn(8, 8, device=DEVICE), torch.randn(8, 8, device=DEVICE)


FORBIDDEN = [
    ("torch.matmul", lambda a, b: torch.matmul(a, b)),
    ("torch.mm", lambda a, b: torch.mm(a, b)),
    ("torch.bmm", lambda a, b: torch.bmm(a[None], b[None])),
    ("torch.addmm", lambda a, b: torch.addmm(a, a, b)),
    ("@ operator", lambda a, b: a @ b),
    ("torch.nn.functional.linear", lambda a, b: F.linear(a, b)),
    ("torch.einsum", lambda a, b: torch.einsum("ik,kj->ij", a, b)),
    ("torch.tensordot", lambda a, b: torch.tensordot(a, b, dims=1)),
    ("Tensor.mm", lambda a, b: a.mm(b)),
    ("aten.mm", lambda a, b: torch.ops.aten.mm(a, b)),
    ("aten.addmm", lambda a, b: torch.ops.aten.addmm.default(a, a, b)),
    ("Tensor.numpy", lambda a, b: a.cpu().numpy() @ b.cpu().numpy()),
]


@pytest.mark.parametrize(("name", "call"), FORBIDDEN, ids=[n for n, _ in FORBIDDEN])
def test_each_library_matmul_path_is_refused_by_name(name, call):
    a, b = _pair()
    with pytest.raises(ForbiddenCallError) as caught, Guard():
        call(a, b)
    if not (HAS_GPU and name == "Tensor.numpy"):  # on a GPU the copy to the host is refused first
        assert name in str(caught.value)


@pytest.mark.parametrize("name", ["matmul", "dot", "einsum", "tensordot", "inner"])
def test_host_numpy_matmuls_are_refused(name):
    x = np.ones((3, 3))
    args = ("ij,jk->ik", x, x) if name == "einsum" else (x, x)
    with pytest.raises(ForbiddenCallError, match=f"numpy.{name}"), Guard():
        getattr(np, name)(*args)


def test_numpy_is_restored_after_the_guard():
    original = np.matmul
    with Guard():
        assert np.matmul is not original
    assert np.matmul is original
    assert np.matmul(np.eye(2), np.eye(2)).sum() == 2


def test_ordinary_tensor_work_is_allowed():
    a, b = _pair()
    with Guard():
        c = (a * b + 1).sum(dim=0)
    assert c.shape == (8,)


def test_poisoned_allocations_are_nan():
    with Guard(poison=True):
        empty = torch.empty(4, 4, device=DEVICE)
        like = torch.empty_like(empty)
        ints = torch.empty(3, dtype=torch.int32, device=DEVICE)
    assert torch.isnan(empty).all() and torch.isnan(like).all()
    assert ints.shape == (3,)


def test_triton_launches_are_counted_and_trusted():
    a, b = _pair()
    with Guard() as guard:
        c = good_matmul(a, b)
    assert guard.launched and guard.launches[0] == "_matmul"
    assert torch.allclose(c, a @ b, atol=1e-4)


def test_no_launch_is_seen_when_no_kernel_runs():
    a, b = _pair()
    with Guard() as guard:
        (a[:, :, None] * b[None, :, :]).sum(dim=1)
    assert not guard.launched


def test_guards_do_not_nest():
    with Guard(), pytest.raises(RuntimeError, match="nest"), Guard():
        pass


@pytest.mark.gpu
def test_copying_a_gpu_tensor_to_the_host_is_refused():
    a, _ = _pair()
    with pytest.raises(ForbiddenCallError, match="host"), Guard():
        a.cpu()
