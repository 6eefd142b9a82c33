import dataclasses

import pytest
import torch

from course import spec
from course.exercises.matmul import freivalds_error
from course.exercises.matmul_fp32 import SPEC


def test_registry_finds_specs_by_id():
    assert spec.get("w1d7.matmul_fp32") is SPEC
    assert spec.get(SPEC) is SPEC
    assert SPEC in spec.all_specs()


def test_unknown_spec_names_the_known_ones():
    with pytest.raises(KeyError, match="w1d7.matmul_fp32"):
        spec.get("no.such.exercise")


def test_threshold_bands_give_partial_credit():
    t = SPEC.threshold("vs_cublas")
    assert t.credit(0.1) == 0.0
    assert t.credit(0.45) == 0.5
    assert t.credit(0.7) == 1.0
    assert t.score(0.56) == pytest.approx(1.5)


def test_threshold_rejects_bands_that_do_not_rise():
    with pytest.raises(ValueError):
        spec.Threshold("x", "absolute", 1.0, ((2.0, 1.0), (1.0, 0.5)), "fp32")
    with pytest.raises(ValueError):
        spec.Threshold("x", "fastest", 1.0, ((1.0, 1.0),), "fp32")
    with pytest.raises(ValueError, match="which library"):
        spec.Threshold("vs_x", "vs_library", 1.0, ((1.0, 1.0),), "fp32")


def test_a_threshold_description_states_the_bands_it_grades():
    assert spec.floor(500, "fp32").description == "at least 500 GFLOP/s (geometric mean over the benchmark shapes)"
    copy = spec.vs_library("vs_copy", "torch's copy", 2.0, ((0.5, 0.5), (0.875, 1.0)), "fp32", unit="GB/s")
    assert copy.description == "bandwidth as a fraction of torch's copy, same run; full points at 87.5%"
    assert spec.vs_reference(1.0, ((0.85, 1.0),), "fp16").description == \
        "speed as a fraction of the reference solution, same run; full points at 85%"


def test_a_spec_refuses_a_threshold_in_another_rate():
    with pytest.raises(ValueError, match="not stated in the spec's rate"):
        dataclasses.replace(SPEC, thresholds=(spec.floor(100, "fp32", unit="GB/s"),))


def test_every_threshold_names_its_precision():
    for threshold in SPEC.thresholds:
        assert "fp32" in threshold.precision


def test_geometric_mean():
    assert spec.geometric_mean([2.0, 8.0]) == pytest.approx(4.0)
    assert spec.geometric_mean([1.0, 0.0]) == 0.0
    assert spec.geometric_mean([]) == 0.0


@pytest.mark.parametrize("shape_set", [SPEC.visible_shapes, SPEC.hidden_shapes])
def test_test_shapes_include_ragged_and_non_square_sizes(shape_set):
    for shapes in (shape_set.gpu, shape_set.cpu):
        assert any(any(n % 64 for n in shape) for shape in shapes)
        assert any(len(set(shape)) > 1 for shape in shapes)


def test_inputs_are_random_seeded_and_never_zero():
    a1, b1 = SPEC.make_inputs((8, 9, 10), 3, "cpu")
    a2, _ = SPEC.make_inputs((8, 9, 10), 3, "cpu")
    a3, _ = SPEC.make_inputs((8, 9, 10), 4, "cpu")
    assert a1.shape == (8, 10) and b1.shape == (10, 9)
    assert torch.equal(a1, a2) and not torch.equal(a1, a3)
    assert a1.abs().sum() > 0


def test_reference_is_fp64():
    inputs = SPEC.make_inputs((5, 6, 7), 0, "cpu")
    assert SPEC.reference(inputs).dtype == torch.float64


def test_freivalds_catches_one_wrong_element():
    inputs = SPEC.make_inputs((256, 200, 128), 0, "cpu")
    good = (inputs[0].double() @ inputs[1].double()).float()
    assert freivalds_error(inputs, good) < SPEC.tolerance
    bad = good.clone()
    bad[17, 33] += 10.0
    assert freivalds_error(inputs, bad) > SPEC.tolerance


def test_grade_ids_follow_the_spec():
    assert SPEC.grade_id(SPEC.threshold("floor")) == "perf_w1d7_matmul_fp32_floor"


def test_the_baseline_ignores_a_later_rebinding_of_torch_mm(monkeypatch):
    from course.exercises import matmul_fp32

    monkeypatch.setattr(torch, "mm", lambda a, b: torch.zeros(a.shape[0], b.shape[1]))
    inputs = SPEC.make_inputs((8, 9, 10), 0, "cpu")
    assert torch.allclose(matmul_fp32.cublas_fp32(inputs).double(), SPEC.reference(inputs), atol=1e-4)


def test_every_spec_lives_in_the_module_its_id_names():
    # spec.get loads only the module an id names; a spec registered elsewhere would load every module.
    misplaced = {s.id: spec.home(s.id) for s in spec.all_specs() if spec._homes(s.id) != [spec.home(s.id)]}
    assert misplaced == {}


def test_get_loads_the_specs_own_module_alone():
    import json
    import subprocess
    import sys

    probe = ("import json, sys\nfrom course import spec\nspec.get('w2d1.classify')\n"
             "print(json.dumps(sorted(m for m in sys.modules if m.startswith('course.exercises.'))))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    assert json.loads(done.stdout) == ["course.exercises.kernel_measurement", "course.exercises.w2d1_profiling"]


def test_a_threshold_computes_its_level_from_the_runs_times():
    times = [spec.ShapeTimes((8, 8, 8), 2e9, 2.0, library_ms=1.0, reference_ms=1.6),
             spec.ShapeTimes((16, 8, 8), 8e9, 4.0, library_ms=4.0, reference_ms=2.0)]
    assert SPEC.threshold("floor").level(times) == pytest.approx((1000 * 2000) ** 0.5)
    assert SPEC.threshold("vs_cublas").level(times) == pytest.approx((0.5 * 1.0) ** 0.5)
    assert SPEC.threshold("vs_reference").level(times) == pytest.approx((0.8 * 0.5) ** 0.5)
    assert SPEC.threshold("vs_cublas").shown(0.7071, "cuBLAS") == "0.71 of cuBLAS"
    assert SPEC.threshold("floor").shown(1414.2, "cuBLAS") == "1414 GFLOP/s"
    unmeasured = [spec.ShapeTimes((8, 8, 8), 2e9, 2.0)]
    with pytest.raises(LookupError, match="library baseline was not measured for shapes"):
        SPEC.threshold("vs_cublas").level(unmeasured)


def test_a_threshold_states_its_steps_in_one_wording():
    vs_cublas, vs_reference = SPEC.threshold("vs_cublas"), SPEC.threshold("vs_reference")
    assert vs_cublas.steps_text() == "25%, 40%, 55%, 70% earn a quarter, half, three quarters, all"
    assert vs_reference.steps_text(vs_cublas) == "30%, 50%, 70%, 85% earn the same steps"
    assert SPEC.threshold("floor").steps_text() == "at least 500 GFLOP/s"
    assert vs_cublas.bands_text == ("fp32 (ieee) against cuBLAS SGEMM with TF32 off; "
                                    ">=0.25: 25%, >=0.4: 50%, >=0.55: 75%, >=0.7: 100%")
