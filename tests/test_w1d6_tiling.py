"""Week 1 Day 6 (tiling): the spec, its traffic formula, the solution kernel against the checks, and the plot."""

import importlib.util
import sys

import nbformat
import pytest
import torch

from course import check, plot, spec
from course.exercises.w1d6_tiling import SPEC, loaded_bytes
from grader.intake.layout import REPO

NOTEBOOK = REPO / "solutions" / "week1" / "day6_tiling.ipynb"
STUDENT = REPO / "week1" / "day6_tiling.ipynb"


def test_the_spec_is_registered_for_its_notebook():
    assert spec.get("w1d6.matmul_outer") is SPEC
    assert SPEC in spec.for_notebook("week1/day6_tiling")
    assert SPEC.precision == "fp32-ieee" and SPEC.rate_unit == "GFLOP/s"
    assert set(SPEC.forbidden_calls) == {"tl.dot", "tl.dot_scaled"}


def test_grade_ids_of_the_spec_are_cells_of_the_notebook():
    nb = nbformat.read(str(NOTEBOOK), as_version=4)
    ids = {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in nb.cells}
    for grade_id in [*SPEC.correctness_cells, *(SPEC.grade_id(t) for t in SPEC.thresholds)]:
        assert grade_id in ids and ids[grade_id].metadata.nbgrader.get("grade"), grade_id
    assert {t.kind for t in SPEC.thresholds} == {"absolute", "vs_reference"}


def test_traffic_formula_on_a_hand_counted_case():
    # M, N, K = 3, 5, 2 with 2 x 4 tiles: a 2 x 2 grid. Each element of A is loaded by the 2 programs of its
    # row of tiles (6 * 2), each element of B by the 2 programs of its column (10 * 2): 32 values, 128 bytes.
    assert loaded_bytes((3, 5, 2), 2, 4) == 128
    # 1 x 1 tiles are the untiled kernel: 2 * M * N * K values.
    assert loaded_bytes((3, 5, 2), 1, 1) == 4 * 2 * 3 * 5 * 2
    assert loaded_bytes((1000, 1000, 1000), 64, 64) == 128_000_000


def test_the_reference_is_right_on_a_tiny_case():
    a = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    b = torch.tensor([[5.0], [6.0]])
    assert SPEC.reference((a, b)).tolist() == [[17.0], [39.0]]
    assert SPEC.reference((a, b)).dtype == torch.float64


def test_inputs_are_fresh_and_seeded():
    a1, b1 = SPEC.make_inputs((4, 5, 6), 1, "cpu")
    a2, _ = SPEC.make_inputs((4, 5, 6), 1, "cpu")
    a3, _ = SPEC.make_inputs((4, 5, 6), 2, "cpu")
    assert a1.shape == (4, 6) and b1.shape == (6, 5)
    assert torch.equal(a1, a2) and not torch.equal(a1, a3) and a1.abs().sum() > 0


@pytest.mark.parametrize("shape_set", [SPEC.visible_shapes, SPEC.hidden_shapes])
def test_checked_shapes_are_ragged_and_non_square(shape_set):
    for shapes in (shape_set.gpu, shape_set.cpu):
        assert any(any(n % 64 for n in shape) for shape in shapes)
        assert any(len(set(shape)) > 1 for shape in shapes)
    assert any(1 in shape[:2] for shape in (*SPEC.visible_shapes.cpu, *SPEC.hidden_shapes.cpu))


def _solution_module(tmp_path, cell_id="tiled_kernel", source=None):
    """The solution cell as a module (inspect needs a file to read the kernel's source from)."""
    if source is None:
        nb = nbformat.read(str(NOTEBOOK), as_version=4)
        source = next(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == cell_id)
    path = tmp_path / f"day6_{cell_id}.py"
    path.write_text("import torch\nimport triton\nimport triton.language as tl\nfrom course import device\n"
                    "DEVICE = device.info()\n" + source, encoding="utf-8")
    module_spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[path.stem] = module
    module_spec.loader.exec_module(module)
    return module


def test_the_solution_passes_the_visible_checks_without_warnings(tmp_path, capsys):
    module = _solution_module(tmp_path)
    results = check.check(SPEC, module.matmul_tiled, "visible")
    assert results and all(r.passed for r in results), [r.message for r in results]
    assert "Warning" not in capsys.readouterr().out


def test_the_same_tiles_through_tl_dot_are_refused(tmp_path):
    nb = nbformat.read(str(NOTEBOOK), as_version=4)
    source = next(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "tiled_kernel")
    update = "acc += a_col[:, None] * b_row[None, :]"
    assert update in source
    with_dot = source.replace(update, "acc = tl.dot(a_col[:, None], b_row[None, :], acc, input_precision=\"ieee\")")
    module = _solution_module(tmp_path, "with_dot", with_dot)
    results = check.check(SPEC, module.matmul_tiled, [(16, 16, 16)])
    assert not results[0].passed and "calls tl.dot" in results[0].message


def test_the_student_copy_is_a_stub():
    nb = nbformat.read(str(STUDENT), as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "tiled_kernel")
    assert "raise NotImplementedError()" in cell.source and "static_range" not in cell.source
    assert "HIDDEN" not in "".join(c.source for c in nb.cells)


def test_tile_reuse_plot_draws_with_and_without_measurements():
    sides, traffic = [1, 16, 64], [8e9, 5e8, 1.25e8]
    assert plot.to_png(plot.tile_reuse(sides, traffic, "traffic")).startswith(b"\x89PNG")
    figure = plot.tile_reuse(sides, traffic, "both", gflops={1: 90.0, 64: 8000.0})
    assert len(figure.axes) == 2
    assert plot.to_png(figure).startswith(b"\x89PNG")
    with pytest.raises(ValueError, match="3 tile sides"):
        plot.tile_reuse(sides, traffic[:2], "bad")
